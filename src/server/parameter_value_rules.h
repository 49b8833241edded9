#pragma once
// Grammar pieces for tool-call formats that write arguments one parameter at a time (DeepSeek's DSML, GLM-4.5,
// Qwen3-Coder): a string property's value as raw text up to the tag that closes it, any other value as JSON
// following the property's schema.
#include <span>
#include <string>
#include <string_view>

#include "server/request_fields.h"

namespace tern::server {

// The properties of a tool's object `schema`, in its order, and which of them are required. A schema that is not
// of an object is a 400 naming `tools`; `written_as` says how the format writes arguments, for the message.
struct ObjectParameters {
  Json properties;
  Json required;

  bool is_required(const std::string& key) const;
};
ObjectParameters object_parameters(const Json& schema, std::string_view written_as);

// `rule_name ::=` text that holds none of `end_tags`. Each tag has its only '<' at its start, so text followed by
// one of them holds that tag first where the grammar put it, which is where the parser ends the value.
std::string raw_text_rule(const std::string& rule_name, std::span<const std::string_view> end_tags);

// Whether raw text can follow the property's schema: a string with no keyword beyond enum and const that constrains
// its text (a pattern, length or format needs the JSON converter).
bool raw_text_follows(const Json& property);

// A raw-text property's value: any text (`text_rule`), or one of its enum or const values.
std::string raw_text_value(const Json& property, const std::string& text_rule);

// The rules of a JSON property value, `<value_prefix>root`, with the $defs and definitions of the whole `schema` its
// $refs point into.
std::string json_value_rules(const Json& schema, const Json& property, const std::string& value_prefix);

}  // namespace tern::server
