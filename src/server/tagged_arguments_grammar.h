#pragma once
// Forced tool calls in GLM-4.5's and Qwen3-Coder's formats write arguments as one tagged parameter per property
// (chat::TaggedParameterSyntax), the value bare: a string property's as raw text, any other as JSON. Their parsers
// read a value by the request's tool schema, so a string stays a string even when its text looks like JSON. This
// builds their grammar from a tool's schema.
#include <string>

#include "chat/output_parser_registry.h"
#include "server/request_fields.h"

namespace tern::server {

// The rules of the arguments of the tool `name`, `<rule_prefix>root` being all of them: the properties of the object
// `schema` in its order, the required ones always and the others optionally. A 400 naming `tools` for what the
// format cannot write so that its parser reads it back: a schema not of an object, a function or property name the
// parser would cut or trim, or a string property with a keyword raw text cannot be held to (a pattern, length or
// format).
std::string tagged_arguments_rules(const std::string& name, const Json& schema,
                                   const chat::TaggedParameterSyntax& syntax, const std::string& rule_prefix);

}  // namespace tern::server
