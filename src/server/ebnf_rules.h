#pragma once
// Pieces of the EBNF sources the server builds (grammar/ebnf_parser.h): literals of arbitrary text, and the rules
// of a JSON schema renamed so that several schemas' rules live in one grammar.
#include <string>
#include <string_view>

#include "server/request_fields.h"

namespace tern::server {

// An EBNF "..." literal of `text`.
std::string ebnf_literal(std::string_view text);

// The literal followed by a space, or nothing for empty text (a grammar item cannot be empty).
std::string literal_item(std::string_view text);

// The rules of `schema` (grammar::json_schema_to_ebnf), every rule name prefixed with `rule_prefix`: the schema's
// root rule is `<rule_prefix>root`. A schema the converter refuses is a 400 naming `tools`.
std::string schema_rules(const Json& schema, const std::string& rule_prefix);

}  // namespace tern::server
