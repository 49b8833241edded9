#pragma once
// Forced tool calls in DeepSeek's DSML (chat/dsml_tool_call_parser.h) write arguments as one parameter per
// property rather than as one JSON object:
//   <｜DSML｜parameter name="KEY" string="true">raw text</｜DSML｜parameter>      a string property
//   <｜DSML｜parameter name="KEY" string="false">JSON value</｜DSML｜parameter>   any other property
// each followed by a newline, as DeepSeek's encoders write them. This builds their grammar from a tool's schema.
#include <string>

#include "server/request_fields.h"

namespace tern::server {

// The rules of one tool's arguments, `<rule_prefix>root` being all of them: the properties of the object `schema`
// in its order, the required ones always and the others optionally. A property whose schema is a plain string is
// raw text that cannot hold the closing tag, or one of its enum/const values; any other property (a string with a
// pattern, length or format among them, which raw text would not enforce) is JSON following its schema. A schema
// that is not of an object with properties the converter can enforce is a 400 naming `tools`.
std::string dsml_arguments_rules(const Json& schema, const std::string& rule_prefix);

}  // namespace tern::server
