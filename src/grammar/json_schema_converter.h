#pragma once
// JSON Schema to EBNF (see ebnf_parser.h). Every complete output validates against the schema; where a keyword
// cannot be expressed exactly the grammar generates a subset of the valid values, and where no useful subset is known
// the schema is refused. docs/structured_output.md lists what each keyword and format generates and what is refused.
// enum/const literals are checked against the rest of the schema (json_schema_validator.h), oneOf is exactly one
// branch (overlapping branches are narrowed or refused), keywords beside $ref apply (draft 2019-09 on).
// Generated numbers have at most 16 integer digits and 2 exponent digits, so they parse to finite doubles.
// Between JSON tokens at most one whitespace character is allowed (compact JSON, as vLLM's disable_any_whitespace),
// and object properties come in the schema's order.
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace tern::grammar {

// Throws tern::Error naming the JSON parse position or the schema path of an unsupported or invalid part.
std::string json_schema_to_ebnf(std::string_view schema_json);
// Properties are generated in the schema's order; a nlohmann::json (sorted keys) gives them sorted.
std::string json_schema_to_ebnf(const nlohmann::ordered_json& schema);
std::string json_schema_to_ebnf(const nlohmann::json& schema);

// Any JSON object (OpenAI's json_object response format).
std::string json_object_ebnf();

}  // namespace tern::grammar
