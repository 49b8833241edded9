#pragma once
// JSON Schema to EBNF (see ebnf_parser.h). Supported: type (and type lists), properties, required,
// additionalProperties (true/false/schema; absent means no extra keys: a subset of what the schema allows),
// enum, const, items, prefixItems, minItems, maxItems, anyOf/oneOf (oneOf as anyOf: branches should be disjoint),
// allOf (merged), $ref into the document ($defs, definitions, any "#/..." pointer; recursion allowed),
// string minLength/maxLength/pattern/format (date, time, date-time, email, uuid, ipv4), integer and number
// minimum/maximum/exclusiveMinimum/exclusiveMaximum (numbers with bounds are generated without exponent, and
// fractional values only strictly inside integer bounds: a subset). Keywords that would constrain the output in
// ways the grammar cannot express are errors, never silently ignored.
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
