#pragma once
// Checks JSON values against a JSON Schema (drafts 4 to 2020-12), for the converter: which enum/const literals the
// rest of a schema admits, and which oneOf branches can share a value. The verdict is three-valued because some
// checks are not exact here (string formats are checked with the converter's subset regexes, patterns with anchors
// only as whole matches); callers keep a literal only when it is surely valid and treat branches as disjoint only
// when a value is surely invalid. Unknown keywords are annotations; unevaluatedProperties/unevaluatedItems and dynamic
// references are errors.
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "grammar/json_schema_pattern.h"

namespace tern::grammar {

enum class Verdict { kValid, kInvalid, kUnknown };

class JsonSchemaValidator {
 public:
  using json = nlohmann::ordered_json;

  // root: the document that local "$ref"s ("#/...") point into; it must outlive the validator.
  // refs_hide_siblings: keywords beside a $ref are ignored (drafts 3 to 7).
  explicit JsonSchemaValidator(const json& root, bool refs_hide_siblings = false)
      : root_(root), refs_hide_siblings_(refs_hide_siblings) {}

  // Throws tern::Error naming a keyword it cannot check or a malformed one.
  Verdict check(const json& value, const json& schema);

 private:
  Verdict check_at(const json& value, const json& schema, int depth);
  Verdict check_number(const json& value, const json& schema);
  Verdict check_string(const std::string& value, const json& schema);
  Verdict check_array(const json& value, const json& schema, int depth);
  Verdict check_object(const json& value, const json& schema, int depth);
  Verdict pattern_verdict(const std::string& pattern, const std::string& text);

  const json& root_;
  bool refs_hide_siblings_;
  std::map<std::string, std::unique_ptr<SchemaPatternSearch>> patterns_;
};

// JSON equality as JSON Schema defines it: numbers by value, object members in any order.
bool json_equal(const nlohmann::ordered_json& a, const nlohmann::ordered_json& b);

}  // namespace tern::grammar
