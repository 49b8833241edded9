// Schemas built to exhaust the compiler: ones that refer to themselves twice per level (an allOf, anyOf, oneOf,
// items or properties of two $refs to the same definition) expanded 2^depth times, and one object of 160,000
// properties took about 24 GB. Each is now refused quickly (a tern::Error, a 400 in the server) or compiles bounded,
// while large ordinary schemas still compile.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "core/error.h"
#include "grammar/compiled_grammar.h"
#include "grammar/grammar_matcher.h"
#include "grammar/json_schema_converter.h"
#include "test_vocabulary.h"

namespace tern::grammar {
namespace {

using Clock = std::chrono::steady_clock;

// Well above what these take when refused (under 0.1 s each, about 1.5 s for the 160,000 properties), far below
// what they took before.
constexpr double kMaxSecondsToRefuse = 5.0;

struct Outcome {
  std::string error;  // empty when it compiled
  double seconds = 0;
};

Outcome compile(const std::string& schema) {
  const auto start = Clock::now();
  Outcome outcome;
  try {
    CompiledGrammar::compile(GrammarKind::kJsonSchema, schema, testing::tiny_vocabulary());
  } catch (const Error& e) {
    outcome.error = e.what();
  }
  outcome.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return outcome;
}

void expect_refused_quickly(const std::string& schema, const std::string& expected_message = "") {
  const Outcome outcome = compile(schema);
  EXPECT_FALSE(outcome.error.empty()) << "compiled: " << schema.substr(0, 200);
  EXPECT_LT(outcome.seconds, kMaxSecondsToRefuse) << outcome.error.substr(0, 300);
  EXPECT_NE(outcome.error.find(expected_message), std::string::npos) << outcome.error.substr(0, 300);
}

// {"$defs": {"a": <definition>}, "$ref": "#/$defs/a"}, with A standing for {"$ref": "#/$defs/a"}.
std::string self_referring(std::string definition) {
  for (size_t at = definition.find('A'); at != std::string::npos; at = definition.find('A', at)) {
    definition.replace(at, 1, R"({"$ref": "#/$defs/a"})");
  }
  return R"({"$defs": {"a": )" + definition + R"(}, "$ref": "#/$defs/a"})";
}

TEST(JsonSchemaLimits, SchemasThatReferToThemselvesTwicePerLevelAreRefusedQuickly) {
  for (const char* definition : {
           R"({"allOf": [A, A]})",
           R"({"allOf": [A, A, A]})",
           R"({"allOf": [A, {"allOf": [A]}]})",
           R"({"anyOf": [A, A], "type": "object"})",
           R"({"oneOf": [A, A]})",
           R"({"oneOf": [A, A], "type": "object"})",
           R"({"oneOf": [{"allOf": [A]}, {"allOf": [A]}]})",
           R"({"type": "array", "items": {"allOf": [A, A]}})",
           R"({"type": "object", "properties": {"x": {"allOf": [A]}, "y": {"allOf": [A]}}})",
           R"({"type": "object", "properties": {"x": A, "y": A}, "required": ["x", "y"]})",
           R"({"anyOf": [A, A]})",
       }) {
    SCOPED_TRACE(definition);
    expect_refused_quickly(self_referring(definition));
  }
  // Two definitions that each take the other twice.
  expect_refused_quickly(R"({"$defs": {"a": {"allOf": [{"$ref": "#/$defs/b"}, {"$ref": "#/$defs/b"}]},
                                       "b": {"allOf": [{"$ref": "#/$defs/a"}, {"$ref": "#/$defs/a"}]}},
                             "$ref": "#/$defs/a"})");
}

TEST(JsonSchemaLimits, TheStepBudgetNamesItself) {
  // A oneOf of two self-references is inspected branch against branch, each inspection taking both again.
  const std::string error = compile(self_referring(R"({"oneOf": [A, A], "type": "object"})")).error;
  EXPECT_NE(error.find("steps"), std::string::npos) << error;
  EXPECT_NE(error.find("refers to itself more than once per level"), std::string::npos) << error;
}

TEST(JsonSchemaLimits, RecursiveSchemasWithAFiniteValueStillCompile) {
  const std::string tree = R"({"$defs": {"node": {"type": "object", "properties": {"v": {"type": "integer"},
      "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}}, "required": ["v"]}}, "$ref": "#/$defs/node"})";
  GrammarMatcher matcher(CompiledGrammar::compile(GrammarKind::kJsonSchema, tree, testing::tiny_vocabulary()));
  EXPECT_TRUE(matcher.accept_bytes(R"({"v":1,"kids":[{"v":2,"kids":[]},{"v":3}]})"));
  EXPECT_TRUE(matcher.is_accepting());
}

std::string object_schema(size_t num_properties, bool required) {
  std::string properties, names;
  for (size_t i = 0; i < num_properties; ++i) {
    properties += fmt::format(R"({}"p{}": {{"type": "string"}})", i ? ", " : "", i);
    names += fmt::format(R"({}"p{}")", i ? ", " : "", i);
  }
  return fmt::format(R"({{"type": "object", "properties": {{{}}}{}}})", properties,
                     required ? fmt::format(R"(, "required": [{}])", names) : "");
}

TEST(JsonSchemaLimits, AnObjectOf160000PropertiesIsRefusedQuicklyByTheGrammarSize) {
  // Optional: each one before the first required one repeats the rest (quadratic); required: linear, still too big.
  for (bool required : {false, true}) {
    SCOPED_TRACE(required ? "required" : "optional");
    expect_refused_quickly(object_schema(160'000, required), "properties would exceed 4 MiB");
  }
}

TEST(JsonSchemaLimits, LargeOrdinarySchemasStillConvert) {
  // 4,000 properties in 200 objects of 20, about what JSON Schema Store's large schemas hold.
  std::string objects;
  for (int i = 0; i < 200; ++i) objects += fmt::format(R"({}"o{}": {})", i ? ", " : "", i, object_schema(20, false));
  const std::string wide = R"({"type": "object", "properties": {)" + objects + "}}";
  EXPECT_NO_THROW(json_schema_to_ebnf(std::string_view(wide)));
  EXPECT_NO_THROW(json_schema_to_ebnf(std::string_view(object_schema(5'000, true))));
  EXPECT_NO_THROW(json_schema_to_ebnf(std::string_view(object_schema(300, false))));
}

}  // namespace
}  // namespace tern::grammar
