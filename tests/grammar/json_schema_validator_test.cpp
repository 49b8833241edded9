// The converter's value checker against hand-worked verdicts (the JSON Schema specification's meaning of each
// keyword): surely valid, surely invalid, and unknown where its format and anchored-pattern checks are not exact.
#include "grammar/json_schema_validator.h"

#include <gtest/gtest.h>

namespace tern::grammar {
namespace {

using json = nlohmann::ordered_json;

Verdict verdict_of(const char* schema, const char* value) {
  json root = json::parse(schema);
  return JsonSchemaValidator(root).check(json::parse(value), root);
}

TEST(JsonSchemaValidator, TypesAndLiterals) {
  EXPECT_EQ(verdict_of(R"({"type": "integer"})", "3.0"), Verdict::kValid);  // an integer by value
  EXPECT_EQ(verdict_of(R"({"type": "integer"})", "3.5"), Verdict::kInvalid);
  EXPECT_EQ(verdict_of(R"({"type": ["string", "null"]})", "null"), Verdict::kValid);
  EXPECT_EQ(verdict_of(R"({"type": "string", "nullable": true})", "null"), Verdict::kValid);
  EXPECT_EQ(verdict_of(R"({"enum": [{"a": 1, "b": [1, 2]}]})", R"({"b": [1.0, 2], "a": 1})"), Verdict::kValid);
  EXPECT_EQ(verdict_of(R"({"const": [1, 2]})", "[2, 1]"), Verdict::kInvalid);
}

TEST(JsonSchemaValidator, StringsCountCodePoints) {
  EXPECT_EQ(verdict_of(R"({"maxLength": 2})", R"("日本")"), Verdict::kValid);
  EXPECT_EQ(verdict_of(R"({"minLength": 3})", R"("日本")"), Verdict::kInvalid);
  EXPECT_EQ(verdict_of(R"({"pattern": "b+"})", R"("abbc")"), Verdict::kValid);
  EXPECT_EQ(verdict_of(R"({"pattern": "b+"})", R"("ac")"), Verdict::kInvalid);
  EXPECT_EQ(verdict_of(R"({"pattern": "^a"})", R"("ab")"), Verdict::kValid);
  EXPECT_EQ(verdict_of(R"({"pattern": "^a"})", R"("ba")"), Verdict::kInvalid);
  EXPECT_EQ(verdict_of(R"({"pattern": "a$"})", R"("ba")"), Verdict::kValid);
  // Anchors on some top-level alternatives: decided only for whole matches.
  EXPECT_EQ(verdict_of(R"({"pattern": "^a|b"})", R"("a")"), Verdict::kValid);
  EXPECT_EQ(verdict_of(R"({"pattern": "^a|b"})", R"("xb")"), Verdict::kUnknown);
  EXPECT_EQ(verdict_of(R"({"format": "date"})", R"("2024-01-31")"), Verdict::kValid);
  EXPECT_EQ(verdict_of(R"({"format": "date"})", R"("2024-02-29")"), Verdict::kUnknown);  // outside the subset regex
  EXPECT_EQ(verdict_of(R"({"format": "no-such-format"})", R"("x")"), Verdict::kValid);
}

TEST(JsonSchemaValidator, Numbers) {
  EXPECT_EQ(verdict_of(R"({"exclusiveMinimum": 1, "maximum": 2})", "1"), Verdict::kInvalid);
  EXPECT_EQ(verdict_of(R"({"minimum": 1, "exclusiveMinimum": true})", "1"), Verdict::kInvalid);  // draft 4
  EXPECT_EQ(verdict_of(R"({"multipleOf": 0.5})", "2.5"), Verdict::kValid);
  EXPECT_EQ(verdict_of(R"({"multipleOf": 3})", "10"), Verdict::kInvalid);
  EXPECT_EQ(verdict_of(R"({"format": "int32"})", "2147483648"), Verdict::kInvalid);
  EXPECT_EQ(verdict_of(R"({"format": "int32"})", R"("2147483648")"), Verdict::kValid);  // not a number: not checked
}

TEST(JsonSchemaValidator, ArraysAndObjects) {
  EXPECT_EQ(verdict_of(R"({"prefixItems": [{"type": "string"}], "items": {"type": "integer"}})", R"(["a", 1, 2])"),
            Verdict::kValid);
  EXPECT_EQ(verdict_of(R"({"items": [{"type": "string"}], "additionalItems": false})", R"(["a", 1])"), Verdict::kInvalid);
  EXPECT_EQ(verdict_of(R"({"uniqueItems": true})", R"([1, 1.0])"), Verdict::kInvalid);
  EXPECT_EQ(verdict_of(R"({"contains": {"type": "null"}, "maxContains": 1})", "[null, 1, null]"), Verdict::kInvalid);
  const char* object = R"({"properties": {"a": {"type": "integer"}}, "patternProperties": {"^x": {"type": "string"}},
                           "additionalProperties": false, "required": ["a"]})";
  EXPECT_EQ(verdict_of(object, R"({"a": 1, "x": "s"})"), Verdict::kValid);
  EXPECT_EQ(verdict_of(object, R"({"a": 1, "y": "s"})"), Verdict::kInvalid);
  EXPECT_EQ(verdict_of(object, R"({"x": "s"})"), Verdict::kInvalid);
  EXPECT_EQ(verdict_of(R"({"dependentRequired": {"a": ["b"]}})", R"({"a": 1})"), Verdict::kInvalid);
  EXPECT_EQ(verdict_of(R"({"dependencies": {"a": {"required": ["b"]}}})", R"({"a": 1, "b": 2})"), Verdict::kValid);
  EXPECT_EQ(verdict_of(R"({"minProperties": 2})", R"({"a": 1})"), Verdict::kInvalid);
}

TEST(JsonSchemaValidator, CombinatorsAndReferences) {
  EXPECT_EQ(verdict_of(R"({"oneOf": [{"type": "integer"}, {"type": "number"}]})", "9"), Verdict::kInvalid);
  EXPECT_EQ(verdict_of(R"({"oneOf": [{"type": "integer"}, {"type": "number"}]})", "9.5"), Verdict::kValid);
  EXPECT_EQ(verdict_of(R"({"not": {"pattern": "^a|b"}})", R"("xb")"), Verdict::kUnknown);
  EXPECT_EQ(verdict_of(R"({"not": {"type": "string"}})", "1"), Verdict::kValid);
  EXPECT_EQ(verdict_of(R"({"if": {"type": "integer"}, "then": {"minimum": 5}, "else": {"type": "string"}})", "3"),
            Verdict::kInvalid);
  EXPECT_EQ(verdict_of(R"({"$defs": {"s": {"type": "string"}}, "$ref": "#/$defs/s", "maxLength": 1})", R"("ab")"),
            Verdict::kInvalid);
  json draft7 = json::parse(R"({"definitions": {"s": {"type": "string"}}, "$ref": "#/definitions/s", "maxLength": 1})");
  EXPECT_EQ(JsonSchemaValidator(draft7, true).check("ab", draft7), Verdict::kValid);
}

}  // namespace
}  // namespace tern::grammar
