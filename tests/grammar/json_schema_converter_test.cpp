// JSON Schema keywords the converter enforces: every literal, branch and format it lets through must validate (the
// cases are the invalid outputs of issue 33 and their neighbours), and what it cannot enforce is a clear error.
// Random outputs of the same schemas are validated with ajv in random_walk_test.cpp.
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "grammar/compiled_grammar.h"
#include "grammar/grammar_matcher.h"
#include "test_vocabulary.h"

namespace tern::grammar {
namespace {

bool matches(std::string_view schema, std::string_view text) {
  GrammarMatcher matcher(CompiledGrammar::compile(GrammarKind::kJsonSchema, schema, testing::tiny_vocabulary()));
  return matcher.accept_bytes(text) && matcher.is_accepting();
}

std::string error_of(std::string_view schema) {
  try {
    CompiledGrammar::compile(GrammarKind::kJsonSchema, schema, testing::tiny_vocabulary());
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(JsonSchemaLiterals, EnumKeepsOnlyValuesOfTheDeclaredType) {
  const char* schema = R"({"enum": [{"a": 1}, "log", 3], "type": "object"})";
  EXPECT_TRUE(matches(schema, R"({"a":1})"));
  EXPECT_FALSE(matches(schema, R"("log")"));
  EXPECT_FALSE(matches(schema, "3"));
  EXPECT_TRUE(matches(R"({"enum": [1, 2.5, "x"], "type": "integer"})", "1"));
  EXPECT_FALSE(matches(R"({"enum": [1, 2.5, "x"], "type": "integer"})", "2.5"));
}

TEST(JsonSchemaLiterals, EnumRespectsStringAndNumberKeywords) {
  const char* lengths = R"({"enum": ["abcdef", "ab", "abc"], "maxLength": 3, "minLength": 3})";
  EXPECT_TRUE(matches(lengths, R"("abc")"));
  EXPECT_FALSE(matches(lengths, R"("abcdef")"));
  EXPECT_FALSE(matches(lengths, R"("ab")"));
  const char* pattern = R"({"enum": ["a1", "b2", "xa9y"], "pattern": "a[0-9]"})";  // unanchored: found anywhere
  EXPECT_TRUE(matches(pattern, R"("a1")"));
  EXPECT_TRUE(matches(pattern, R"("xa9y")"));
  EXPECT_FALSE(matches(pattern, R"("b2")"));
  const char* bounds = R"({"enum": [0, 5, 10, 15], "minimum": 5, "exclusiveMaximum": 15, "multipleOf": 5})";
  EXPECT_TRUE(matches(bounds, "5"));
  EXPECT_TRUE(matches(bounds, "10"));
  EXPECT_FALSE(matches(bounds, "0"));
  EXPECT_FALSE(matches(bounds, "15"));
  const char* format = R"({"enum": ["2024-01-31", "yesterday"], "format": "date"})";
  EXPECT_TRUE(matches(format, R"("2024-01-31")"));
  EXPECT_FALSE(matches(format, R"("yesterday")"));
}

TEST(JsonSchemaLiterals, ConstMustSatisfyItsSiblings) {
  std::string error = error_of(R"({"properties": {"v": {"const": "x", "type": "integer"}}, "required": ["v"]})");
  EXPECT_NE(error.find("/properties/v"), std::string::npos) << error;
  EXPECT_NE(error.find("no value of 'enum'/'const' satisfies"), std::string::npos) << error;
  EXPECT_TRUE(matches(R"({"const": 3, "enum": [1, 3]})", "3"));
  EXPECT_NE(error_of(R"({"const": 2, "enum": [1, 3]})").find("no value"), std::string::npos);
}

TEST(JsonSchemaLiterals, EnumObjectsAreCheckedAgainstObjectKeywords) {
  const char* schema = R"({"enum": [{"a": 1}, {"a": "x"}, {"b": 1}], "properties": {"a": {"type": "integer"}},
                           "required": ["a"]})";
  EXPECT_TRUE(matches(schema, R"({"a":1})"));
  EXPECT_FALSE(matches(schema, R"({"a":"x"})"));
  EXPECT_FALSE(matches(schema, R"({"b":1})"));
}

TEST(JsonSchemaLiterals, EnumInsideAllOfAndRefIsIntersected) {
  const char* schema = R"({"$defs": {"short": {"maxLength": 2}}, "allOf": [{"enum": ["a", "bbb", 7]},
                           {"type": "string"}, {"$ref": "#/$defs/short"}]})";
  EXPECT_TRUE(matches(schema, R"("a")"));
  EXPECT_FALSE(matches(schema, R"("bbb")"));
  EXPECT_FALSE(matches(schema, "7"));
}

TEST(JsonSchemaOneOf, IntegerAndNumberBranchesGenerateOnlyNonIntegers) {
  const char* schema = R"({"oneOf": [{"type": "integer"}, {"type": "number"}]})";
  EXPECT_FALSE(matches(schema, "9"));
  EXPECT_FALSE(matches(schema, "9.0"));
  EXPECT_FALSE(matches(schema, "9.50"));
  EXPECT_TRUE(matches(schema, "9.5"));
  EXPECT_TRUE(matches(schema, "-0.25"));
  // With a third, disjoint branch the others stay.
  EXPECT_TRUE(matches(R"({"oneOf": [{"type": "integer"}, {"type": "number"}, {"type": "string"}]})", R"("s")"));
}

TEST(JsonSchemaOneOf, DisjointBranchesWork) {
  EXPECT_TRUE(matches(R"({"oneOf": [{"type": "string"}, {"type": "null"}]})", "null"));
  const char* ranges = R"({"oneOf": [{"type": "integer", "maximum": 0}, {"type": "integer", "exclusiveMinimum": 0}]})";
  EXPECT_TRUE(matches(ranges, "-3"));
  EXPECT_TRUE(matches(ranges, "3"));
  const char* tagged = R"({"oneOf": [
      {"type": "object", "properties": {"kind": {"const": "a"}, "x": {"type": "integer"}}, "required": ["kind"]},
      {"type": "object", "properties": {"kind": {"const": "b"}, "y": {"type": "string"}}, "required": ["kind"]}]})";
  EXPECT_TRUE(matches(tagged, R"({"kind":"a","x":1})"));
  EXPECT_TRUE(matches(tagged, R"({"kind":"b","y":"s"})"));
  const char* required_keys = R"({"oneOf": [{"properties": {"a": {}}, "required": ["a"]},
                                            {"properties": {"b": {}}, "required": ["b"]}]})";
  EXPECT_TRUE(matches(required_keys, R"({"a":1})"));
  EXPECT_FALSE(matches(required_keys, R"({"a":1,"b":2})"));
  EXPECT_TRUE(matches(R"({"oneOf": [{"enum": ["a", "b"]}, {"enum": ["c"]}]})", R"("c")"));
}

TEST(JsonSchemaOneOf, OverlappingBranchesAreRefused) {
  std::string strings = error_of(R"({"properties": {"p": {"oneOf": [{"type": "string"}, {"type": "string", "maxLength": 3}]}}})");
  EXPECT_NE(strings.find("/properties/p/oneOf"), std::string::npos) << strings;
  EXPECT_NE(strings.find("branches 0 and 1 can match the same value"), std::string::npos) << strings;
  EXPECT_NE(error_of(R"({"oneOf": [{"type": "object"}, {"properties": {"a": {}}}]})").find("can match the same value"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"oneOf": [{"enum": ["a", 1]}, {"type": "string"}]})").find("can match the same value"),
            std::string::npos);
}

TEST(JsonSchemaRef, SiblingKeywordsApplySinceDraft2019) {
  const char* schema = R"({"$defs": {"s": {"type": "string"}}, "properties": {"v": {"$ref": "#/$defs/s", "maxLength": 2}},
                           "required": ["v"]})";
  EXPECT_TRUE(matches(schema, R"({"v":"ab"})"));
  EXPECT_FALSE(matches(schema, R"({"v":"abc"})"));
  const char* draft7 = R"({"$schema": "http://json-schema.org/draft-07/schema#", "definitions": {"s": {"type": "string"}},
                           "properties": {"v": {"$ref": "#/definitions/s", "maxLength": 2}}, "required": ["v"]})";
  EXPECT_TRUE(matches(draft7, R"({"v":"abc"})"));
  // nullable widens only the type beside it (as ajv reads it), not the referenced schema's.
  const char* nullable = R"({"$defs": {"s": {"type": "string"}}, "$ref": "#/$defs/s", "type": "string", "nullable": true})";
  EXPECT_FALSE(matches(nullable, "null"));
  EXPECT_TRUE(matches(nullable, R"("x")"));
}

TEST(JsonSchemaAllOf, BoundsTightenWhicheverPartComesFirst) {
  for (const char* schema : {R"({"allOf": [{"type": "string", "maxLength": 2}, {"maxLength": 5}]})",
                             R"({"allOf": [{"maxLength": 5}, {"type": "string", "maxLength": 2}]})"}) {
    EXPECT_TRUE(matches(schema, R"("ab")")) << schema;
    EXPECT_FALSE(matches(schema, R"("abc")")) << schema;
  }
  const char* closed = R"({"allOf": [{"properties": {"a": {"type": "integer"}}, "additionalProperties": false},
                                     {"properties": {"b": {"type": "integer"}}}]})";
  EXPECT_TRUE(matches(closed, R"({"a":1})"));
  EXPECT_FALSE(matches(closed, R"({"a":1,"b":2})"));
  const char* own_keywords = R"({"properties": {"a": {"type": "integer"}}, "additionalProperties": false,
                                  "allOf": [{"required": ["a"]}]})";
  EXPECT_TRUE(matches(own_keywords, R"({"a":1})"));
  EXPECT_NE(error_of(R"({"allOf": [{"pattern": "a"}, {"pattern": "b"}]})").find("two different values of 'pattern'"),
            std::string::npos);
}

TEST(JsonSchemaFormats, StringFormatsAcceptTypicalValuesAndRejectOthers) {
  auto format = [](const char* name) { return std::string(R"({"type": "string", "format": ")") + name + "\"}"; };
  struct Case {
    const char* format;
    std::vector<const char*> valid;
    std::vector<const char*> invalid;
  };
  const std::vector<Case> cases = {
      {"date", {"2024-01-31"}, {"2024-02-30", "24-01-01"}},
      {"time", {"12:30:00Z", "23:59:59.5+02:00"}, {"24:00:00Z", "12:30:00"}},
      {"date-time", {"2024-01-31T12:30:00Z"}, {"2024-01-31 12:30"}},
      {"duration", {"P1Y2M3DT4H5M6S", "PT5M", "P3W"}, {"P", "PT", "P1H"}},
      {"email", {"a.b@example.com"}, {"a@b", "@example.com"}},
      {"hostname", {"example.com", "a-b.c"}, {"-a.com", "a..b"}},
      {"ipv4", {"192.168.0.1"}, {"256.1.1.1", "1.2.3"}},
      {"ipv6", {"2001:db8:0:0:0:0:2:1", "2001:db8::1", "::", "fe80::"}, {"2001:db8:::1", "1:2:3:4:5:6:7:8:9"}},
      {"uuid", {"123e4567-e89b-12d3-a456-426614174000"}, {"123e4567e89b12d3a456426614174000"}},
      {"uri", {"https://example.com/a/b?x=1#f", "urn:example"}, {"example.com", "/relative"}},
      {"uri-reference", {"https://example.com/a", "/relative/path", "file.txt#x"}, {"a b"}},
      {"url", {"https://example.com/a", "http://a-b.example.org:8080"}, {"mailto:a@b.c", "https://localhost"}},
  };
  for (const auto& c : cases) {
    for (const char* value : c.valid) EXPECT_TRUE(matches(format(c.format), "\"" + std::string(value) + "\"")) << c.format << " " << value;
    for (const char* value : c.invalid) EXPECT_FALSE(matches(format(c.format), "\"" + std::string(value) + "\"")) << c.format << " " << value;
  }
  EXPECT_TRUE(matches(format("made-up"), R"("anything")"));
}

TEST(JsonSchemaFormats, IntegerFormatsBoundTheRange) {
  const char* int32 = R"({"type": "integer", "format": "int32"})";
  EXPECT_TRUE(matches(int32, "2147483647"));
  EXPECT_TRUE(matches(int32, "-2147483648"));
  EXPECT_FALSE(matches(int32, "2147483648"));
  EXPECT_FALSE(matches(int32, "4400000000000000"));
  EXPECT_FALSE(matches(R"({"type": "number", "format": "int32"})", "1.5"));
  EXPECT_TRUE(matches(R"({"type": "number", "format": "int64"})", "4400000000000000"));
}

TEST(JsonSchemaPattern, AnchorsInsideAPatternAreRefused) {
  EXPECT_TRUE(matches(R"({"type": "string", "pattern": "^a$|^b$"})", R"("b")"));
  std::string error = error_of(R"({"type": "string", "pattern": "a^b"})");
  EXPECT_NE(error.find("/pattern"), std::string::npos) << error;
  EXPECT_NE(error.find("only supported at the start or end"), std::string::npos) << error;
  EXPECT_NE(error_of(R"({"type": "string", "pattern": "a", "format": "email"})").find("'pattern' together with 'format'"),
            std::string::npos);
}

TEST(JsonSchemaPattern, LengthsNarrowTheRepetition) {
  const char* schema = R"({"type": "string", "pattern": "^[A-Z]{2}-[0-9]+$", "minLength": 5, "maxLength": 6})";
  EXPECT_TRUE(matches(schema, R"("AB-12")"));
  EXPECT_TRUE(matches(schema, R"("AB-123")"));
  EXPECT_FALSE(matches(schema, R"("AB-1")"));
  EXPECT_FALSE(matches(schema, R"("AB-1234")"));
  const char* choice = R"({"type": "string", "pattern": "^(a+|bc*)$", "maxLength": 2})";
  EXPECT_TRUE(matches(choice, R"("aa")"));
  EXPECT_TRUE(matches(choice, R"("bc")"));
  EXPECT_FALSE(matches(choice, R"("aaa")"));
  EXPECT_TRUE(matches(R"({"type": "string", "pattern": "^é+\"$", "maxLength": 2})", R"("é\"")"));
  // Two varying parts share the length: a{1,2} b{1,1} within maxLength 3.
  EXPECT_TRUE(matches(R"({"type": "string", "pattern": "^a+b+$", "maxLength": 3})", R"("aab")"));
  EXPECT_FALSE(matches(R"({"type": "string", "pattern": "^a+b+$", "maxLength": 3})", R"("abbb")"));
  EXPECT_NE(error_of(R"({"type": "string", "pattern": "^(ab|c)+$", "maxLength": 3})").find("fixed length"), std::string::npos);
  EXPECT_NE(error_of(R"({"type": "string", "pattern": "^abcd$", "maxLength": 3})").find("no whole match"), std::string::npos);
}

TEST(JsonSchemaObjects, PatternPropertiesGenerateMatchingKeys) {
  const char* schema = R"({"type": "object", "properties": {"id": {"type": "integer"}, "y_note": {"type": "string"}},
                           "patternProperties": {"^x_": {"type": "string", "maxLength": 2}, "^n_[a-z]+$": {"type": "integer"},
                                                 "^y_": {"maxLength": 2}},
                           "required": ["id"]})";
  EXPECT_TRUE(matches(schema, R"({"id":1,"n_ab":2,"x_q":"s"})"));
  EXPECT_FALSE(matches(schema, R"({"id":1,"n_ab":"s"})"));
  EXPECT_FALSE(matches(schema, R"({"id":1,"x_q":"abc"})"));
  EXPECT_FALSE(matches(schema, R"({"id":1,"other":2})"));
  EXPECT_TRUE(matches(schema, R"({"id":1,"y_note":"ab"})"));
  EXPECT_FALSE(matches(schema, R"({"id":1,"y_note":"abc"})"));  // a declared name a pattern matches takes both
  // Keys that two patterns may share follow both schemas.
  const char* overlap = R"({"patternProperties": {"^a": {"type": "integer"}, "b$": {"minimum": 5}}})";
  EXPECT_TRUE(matches(overlap, R"({"ab":7})"));
  EXPECT_FALSE(matches(overlap, R"({"ab":3})"));
}

TEST(JsonSchemaObjects, DependenciesAndPropertyCounts) {
  const char* dependent = R"({"properties": {"card": {"type": "string"}, "billing": {"type": "string"}},
                              "dependentRequired": {"card": ["billing"]}})";
  EXPECT_TRUE(matches(dependent, R"({"card":"1","billing":"x"})"));
  EXPECT_FALSE(matches(dependent, R"({"card":"1"})"));
  const char* draft7 = R"({"properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                           "dependencies": {"a": {"properties": {"b": {"minimum": 3}}}}})";
  EXPECT_FALSE(matches(draft7, R"({"a":1,"b":2})"));
  EXPECT_TRUE(matches(draft7, R"({"a":1,"b":4})"));
  const char* counts = R"({"properties": {"a": {"type": "integer"}, "b": {"type": "integer"}, "c": {"type": "integer"}},
                           "minProperties": 1, "maxProperties": 2, "additionalProperties": true})";
  EXPECT_TRUE(matches(counts, R"({"a":1,"b":2})"));
  EXPECT_FALSE(matches(counts, R"({"b":2})"));  // a is made required to reach minProperties
  EXPECT_FALSE(matches(counts, R"({"a":1,"b":2,"c":3})"));
  EXPECT_NE(error_of(R"({"type": "object", "minProperties": 2})").find("minProperties 2"), std::string::npos);
}

TEST(JsonSchemaArrays, UniqueItemsOverSmallDomains) {
  const char* schema = R"({"type": "array", "items": {"enum": ["a", "b", "c", "a"]}, "uniqueItems": true, "minItems": 2})";
  EXPECT_TRUE(matches(schema, R"(["a","c"])"));
  EXPECT_TRUE(matches(schema, R"(["a","b","c"])"));
  EXPECT_FALSE(matches(schema, R"(["a","a"])"));
  EXPECT_FALSE(matches(schema, R"(["b"])"));
  EXPECT_TRUE(matches(R"({"type": "array", "items": {"type": "boolean"}, "uniqueItems": true})", "[false,true]"));
  EXPECT_FALSE(matches(R"({"type": "array", "items": {"type": "boolean"}, "uniqueItems": true})", "[true,true]"));
  EXPECT_TRUE(matches(R"({"type": "array", "items": {"type": "string"}, "uniqueItems": true, "maxItems": 1})", R"(["x"])"));
  // Distinct strings cannot be compared in a grammar: arrays of at most one element are distinct by themselves.
  const char* strings = R"({"type": "array", "items": {"type": "string"}, "uniqueItems": true})";
  EXPECT_TRUE(matches(strings, "[]"));
  EXPECT_TRUE(matches(strings, R"(["x"])"));
  EXPECT_FALSE(matches(strings, R"(["x","y"])"));
  std::string error = error_of(R"({"type": "array", "items": {"type": "string"}, "uniqueItems": true, "minItems": 2})");
  EXPECT_NE(error.find("'uniqueItems' is enforced only"), std::string::npos) << error;
}

// A part of a schema that matches nothing is left out where the value may be absent, and refuses the schema where
// it must be present.
TEST(JsonSchemaEmptyParts, AreLeftOutWhereOptional) {
  const char* optional = R"({"properties": {"a": {"type": "integer"}, "never": {"enum": ["x"], "type": "object"},
                                            "gone": false}, "required": ["a"], "additionalProperties": true})";
  EXPECT_TRUE(matches(optional, R"({"a":1})"));
  EXPECT_FALSE(matches(optional, R"({"a":1,"never":"x"})"));
  EXPECT_FALSE(matches(optional, R"({"a":1,"gone":1})"));  // declared, so not an additional property either
  EXPECT_TRUE(matches(optional, R"({"a":1,"other":2})"));
  const char* closed = R"({"type": "object", "additionalProperties": {"allOf": [false, {"type": "string"}]}})";
  EXPECT_TRUE(matches(closed, "{}"));
  EXPECT_FALSE(matches(closed, R"({"k":"v"})"));
  EXPECT_TRUE(matches(R"({"anyOf": [{"type": "integer", "enum": ["x"]}, {"type": "boolean"}]})", "true"));
  const char* tuple = R"({"type": "array", "prefixItems": [{"type": "integer"}, false, {"type": "string"}]})";
  EXPECT_TRUE(matches(tuple, "[1]"));
  EXPECT_FALSE(matches(tuple, R"([1,"x"])"));
  EXPECT_TRUE(matches(R"({"type": "array", "items": {"allOf": [false]}})", "[]"));
  EXPECT_FALSE(matches(R"({"type": "array", "items": {"allOf": [false]}})", "[1]"));
  EXPECT_NE(error_of(R"({"type": "array", "items": false, "minItems": 1})").find("no array satisfies"), std::string::npos);
  // A $ref whose target matches nothing, left out once, must not leave the next reference to it dangling.
  const char* refs = R"({"$defs": {"none": {"type": "string", "enum": [1]}}, "properties": {
                          "a": {"$ref": "#/$defs/none"}, "b": {"$ref": "#/$defs/none"}, "c": {"type": "null"}}})";
  EXPECT_TRUE(matches(refs, R"({"c":null})"));
  EXPECT_FALSE(matches(refs, R"({"a":1})"));
}

TEST(JsonSchemaOneOf, ObjectBranchesAreNarrowedToExcludeEachOther) {
  // Each branch leaves out the keys the others require: an object with two of them would match two branches.
  const char* required = R"({"type": "object", "properties": {"radius": {"type": "number"}, "length": {"type": "number"}},
                             "oneOf": [{"required": ["radius"]}, {"required": ["length"]}]})";
  EXPECT_TRUE(matches(required, R"({"radius":1})"));
  EXPECT_TRUE(matches(required, R"({"length":2})"));
  EXPECT_FALSE(matches(required, R"({"radius":1,"length":2})"));
  // A discriminator that is optional in the branches is made required, so the other branch's enum rejects it.
  const char* discriminated = R"({"oneOf": [
      {"type": "object", "properties": {"kind": {"enum": ["a"]}, "x": {"type": "integer"}}, "required": ["x"]},
      {"type": "object", "properties": {"kind": {"enum": ["b"]}, "x": {"type": "integer"}}, "required": ["x"]}]})";
  EXPECT_TRUE(matches(discriminated, R"({"kind":"a","x":1})"));
  EXPECT_TRUE(matches(discriminated, R"({"kind":"b","x":1})"));
  EXPECT_FALSE(matches(discriminated, R"({"x":1})"));
  // Overlapping branches that cannot be narrowed are left out; the schema is refused when none is left.
  const char* partly = R"({"oneOf": [{"type": "string", "pattern": "a"}, {"type": "string", "pattern": "b"}, {"type": "integer"}]})";
  EXPECT_TRUE(matches(partly, "7"));
  EXPECT_FALSE(matches(partly, R"("a")"));
  EXPECT_NE(error_of(R"({"oneOf": [{"type": "string", "pattern": "a"}, {"type": "string", "pattern": "b"}]})")
                .find("branches 0 and 1 can match the same value"), std::string::npos);
}

// Real schemas from JSON Schema Store and GitHub (tests/grammar/jsonschemabench) that were refused before.
TEST(JsonSchemaRealWorld, ShapesFromJsonSchemaBench) {
  // Fractions between two exclusive integer bounds (a rollout fraction).
  const char* fraction = R"({"exclusiveMinimum": 0, "exclusiveMaximum": 1})";
  EXPECT_TRUE(matches(fraction, "0.25"));
  EXPECT_FALSE(matches(fraction, "0"));
  EXPECT_FALSE(matches(fraction, "0.0"));
  EXPECT_FALSE(matches(fraction, "1"));
  // A step with one bound far from zero: the multiples nearest the bound.
  const char* key_size = R"({"type": "number", "minimum": 1024, "multipleOf": 256})";
  EXPECT_TRUE(matches(key_size, "2048"));
  EXPECT_FALSE(matches(key_size, "2000"));
  EXPECT_FALSE(matches(key_size, "768"));
  // A $ref fragment is percent-encoded.
  EXPECT_TRUE(matches(R"({"patternProperties": {"[a-z]+": {"type": "integer"}},
                          "properties": {"n": {"$ref": "#/patternProperties/%5Ba-z%5D%2B"}}, "required": ["n"]})", R"({"n":1})"));
  // Keys that are not JSON Schema keywords are ignored, also where allOf parts disagree on them.
  EXPECT_TRUE(matches(R"({"allOf": [{"x-taplo": 1, "type": "string"}, {"x-taplo": 2}]})", R"("s")"));
  // Two conditionals in one allOf (JSON Schema Store's per-kind configurations).
  const char* conditionals = R"({"type": "object", "properties": {"kind": {"enum": ["a", "b"]}, "x": {"type": "integer"}},
      "required": ["kind", "x"], "allOf": [
        {"if": {"properties": {"kind": {"const": "a"}}}, "then": {"properties": {"x": {"minimum": 10}}}},
        {"if": {"properties": {"kind": {"const": "b"}}}, "then": {"properties": {"x": {"maximum": -10}}}}]})";
  EXPECT_TRUE(matches(conditionals, R"({"kind":"a","x":12})"));
  EXPECT_TRUE(matches(conditionals, R"({"kind":"b","x":-12})"));
  EXPECT_FALSE(matches(conditionals, R"({"kind":"a","x":-12})"));
  EXPECT_FALSE(matches(conditionals, R"({"kind":"b","x":12})"));
  // A pattern with several parts of varying length beside maxLength: each part gets a share of the length.
  const char* version = R"({"type": "string", "pattern": "^(\\d+\\.\\d+\\.\\d+.*)$", "maxLength": 12})";
  EXPECT_TRUE(matches(version, R"("1.22.333")"));
  EXPECT_TRUE(matches(version, R"("1.2.3-")"));
  EXPECT_FALSE(matches(version, R"("1.2")"));
  EXPECT_FALSE(matches(version, R"("1.2.3-abcdefghij")"));  // 16 characters
  const char* curie = R"({"type": "string", "pattern": "^([a-z]+):([a-z]+)?:([a-z]+)$", "minLength": 7, "maxLength": 9})";
  EXPECT_TRUE(matches(curie, R"("abcd::x")"));   // minLength raises the first part to 4 letters
  EXPECT_TRUE(matches(curie, R"("abcde:f:g")"));
  EXPECT_FALSE(matches(curie, R"("a::b")"));
  // oneOf branches whose patterns cannot occur in each other's matches (the grammar writes whole matches).
  const char* urls = R"({"oneOf": [{"type": "string", "pattern": "^https?://[a-z]+$"}, {"type": "string", "pattern": "^git://"}]})";
  EXPECT_TRUE(matches(urls, R"("git://")"));
  EXPECT_TRUE(matches(urls, R"("https://x")"));
  EXPECT_FALSE(matches(urls, R"("ftp://x")"));
}

TEST(JsonSchemaNot, IsSupportedWhereTheRestExcludesItOrLeavesOutAKey) {
  EXPECT_TRUE(matches(R"({"type": "integer", "not": {"type": "string"}})", "3"));
  EXPECT_TRUE(matches(R"({"type": "integer", "minimum": 10, "not": {"maximum": 5}})", "12"));
  const char* key = R"({"properties": {"image": {"type": "string"}, "build": {"type": "string"}}, "required": ["image"],
                        "not": {"required": ["build"]}})";
  EXPECT_TRUE(matches(key, R"({"image":"x"})"));
  EXPECT_FALSE(matches(key, R"({"image":"x","build":"y"})"));
  EXPECT_NE(error_of(R"({"type": "string", "not": {"pattern": "x"}})").find("'not' is supported where"), std::string::npos);
  EXPECT_NE(error_of(R"({"not": true})").find("matches nothing"), std::string::npos);
}

TEST(JsonSchemaNumbers, MultipleOf) {
  const char* unbounded = R"({"type": "integer", "multipleOf": 7})";
  EXPECT_TRUE(matches(unbounded, "0"));
  EXPECT_TRUE(matches(unbounded, "-49"));
  EXPECT_TRUE(matches(unbounded, "700000007"));
  EXPECT_FALSE(matches(unbounded, "50"));
  EXPECT_TRUE(matches(unbounded, "700000000000007"));   // 15 digits, the most generated
  EXPECT_FALSE(matches(unbounded, "700000000000008"));
  const char* positive = R"({"type": "integer", "multipleOf": 5, "exclusiveMinimum": 0})";
  EXPECT_TRUE(matches(positive, "15"));
  EXPECT_FALSE(matches(positive, "0"));
  EXPECT_FALSE(matches(positive, "-5"));
  const char* decimal = R"({"type": "number", "multipleOf": 0.1, "minimum": 0, "maximum": 1})";
  EXPECT_TRUE(matches(decimal, "0.5"));
  EXPECT_FALSE(matches(decimal, "0.55"));
  EXPECT_FALSE(matches(decimal, "0.30000000000000004"));  // 3 * 0.1 in doubles: ajv says 0.30000000000000004 / 0.1 is not an integer
  EXPECT_NE(error_of(R"({"type": "number", "multipleOf": 0.5})").find("'multipleOf' is supported"), std::string::npos);
}

TEST(JsonSchemaConditionals, IfThenElse) {
  const char* schema = R"({"type": "object", "properties": {"kind": {"enum": ["a", "b"]}, "n": {"type": "integer"}},
                           "required": ["kind", "n"],
                           "if": {"properties": {"kind": {"const": "a"}}}, "then": {"properties": {"n": {"minimum": 10}}},
                           "else": {"properties": {"kind": {"const": "b"}, "n": {"maximum": 0}}}})";
  EXPECT_TRUE(matches(schema, R"({"kind":"a","n":12})"));
  EXPECT_FALSE(matches(schema, R"({"kind":"a","n":5})"));
  EXPECT_TRUE(matches(schema, R"({"kind":"b","n":-1})"));
  EXPECT_FALSE(matches(schema, R"({"kind":"b","n":1})"));
}

}  // namespace
}  // namespace tern::grammar
