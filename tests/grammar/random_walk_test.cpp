// Seeded random walks ("garbage models") over the real Qwen3 and Llama 3 vocabularies: every output must be in the
// grammar's language, checked by independent references: ajv for JSON Schema, PCRE2 for regexes, recursive-descent
// parsers written here for EBNF grammars.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <gtest/gtest.h>

#include "json_validator.h"
#include "test_vocabulary.h"

namespace tern::grammar {
namespace {

using testing::load_byte_level_vocabulary;
using testing::random_walk;

constexpr int kWalksPerGrammar = 6;

class RandomWalk : public ::testing::TestWithParam<std::string> {
 protected:
  std::shared_ptr<const TokenVocabulary> vocabulary() { return load_byte_level_vocabulary(GetParam()); }
};

const std::vector<std::pair<std::string, std::string>> kSchemas = {
    {"nested_person", R"({
      "type": "object",
      "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 12},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "email": {"type": "string", "format": "email"},
        "address": {"type": "object", "properties": {
            "street": {"type": "string"}, "zip": {"type": "string", "pattern": "^[0-9]{5}$"},
            "geo": {"type": "object", "properties": {"lat": {"type": "number"}, "lon": {"type": "number"}}, "required": ["lat"]}},
          "required": ["zip", "geo"]}
      },
      "required": ["name", "age", "address"]})"},
    {"array_min_max", R"({"type": "object", "properties": {
        "tags": {"type": "array", "items": {"enum": ["a", "b", "c d"]}, "minItems": 1, "maxItems": 4},
        "matrix": {"type": "array", "items": {"type": "array", "items": {"type": "integer"}, "maxItems": 2}, "minItems": 2, "maxItems": 3}},
      "required": ["tags", "matrix"]})"},
    {"enum_mixed", R"({"enum": ["red", "green", 42, null, true, {"k": [1, 2]}, "日本", "q\"uote"]})"},
    {"any_of", R"({"type": "array", "items": {"anyOf": [
        {"type": "string", "maxLength": 5}, {"type": "integer", "minimum": -10, "maximum": 10}, {"type": "null"},
        {"type": "object", "properties": {"x": {"type": "boolean"}}, "required": ["x"]}]}, "maxItems": 5})"},
    {"ref_recursive_tree", R"({"$ref": "#/$defs/node", "$defs": {"node": {"type": "object",
        "properties": {"value": {"type": "integer"}, "children": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 3}},
        "required": ["value"]}}})"},
    {"patterns", R"({"type": "object", "properties": {
        "code": {"type": "string", "pattern": "^[A-Z]{2}-\\d{3,4}$"},
        "phone": {"type": "string", "pattern": "\\(\\d{3}\\) \\d{3}-\\d{4}"},
        "quoted": {"type": "string", "pattern": "^a\"b\\\\c[^x]?$"},
        "word": {"type": "string", "pattern": "^(foo|ba[rz])+$"}},
      "required": ["code", "phone", "quoted", "word"]})"},
    {"integer_ranges", R"({"type": "object", "properties": {
        "small": {"type": "integer", "minimum": -5, "maximum": 5},
        "big": {"type": "integer", "minimum": 1000, "exclusiveMaximum": 100000},
        "negative": {"type": "integer", "maximum": -100},
        "positive": {"type": "integer", "exclusiveMinimum": 0},
        "ratio": {"type": "number", "minimum": -2.5, "maximum": 3}},
      "required": ["small", "big", "negative", "positive", "ratio"]})"},
    {"tuple_prefix_items", R"({"type": "array", "prefixItems": [{"type": "string"}, {"type": "number"}, {"type": "boolean"}],
        "items": false, "minItems": 2})"},
    {"additional_properties", R"({"type": "object", "properties": {"id": {"type": "integer"}, "note": {"type": "string"}},
        "required": ["id"], "additionalProperties": {"type": "number"}})"},
    {"all_of_one_of", R"({"allOf": [
        {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]},
        {"properties": {"b": {"oneOf": [{"type": "boolean"}, {"type": "array", "items": {"type": "null"}}]}}, "required": ["b"]}]})"},
    {"formats", R"({"type": "object", "properties": {
        "date": {"type": "string", "format": "date"}, "time": {"type": "string", "format": "time"},
        "when": {"type": "string", "format": "date-time"}, "id": {"type": "string", "format": "uuid"},
        "ip": {"type": "string", "format": "ipv4"}},
      "required": ["date", "time", "when", "id", "ip"]})"},
    {"more_formats", R"({"type": "object", "properties": {
        "duration": {"type": "string", "format": "duration"}, "email": {"type": "string", "format": "email"},
        "host": {"type": "string", "format": "hostname"}, "ip6": {"type": "string", "format": "ipv6"},
        "uri": {"type": "string", "format": "uri"}, "ref": {"type": "string", "format": "uri-reference"},
        "url": {"type": "string", "format": "url"}, "pointer": {"type": "string", "format": "json-pointer"},
        "bytes": {"type": "string", "format": "byte"}, "local": {"type": "string", "format": "iso-date-time"},
        "small": {"type": "integer", "format": "int32"}, "big": {"type": "number", "format": "int64"}},
      "required": ["duration", "email", "host", "ip6", "uri", "ref", "url", "pointer", "bytes", "local", "small", "big"]})"},
    {"enum_with_siblings", R"({"type": "object", "properties": {
        "typed": {"enum": [{"a": 1}, "log", 3, null], "type": ["object", "null"]},
        "short": {"enum": ["abcdef", "ab", "x"], "maxLength": 3, "pattern": "b"},
        "ranged": {"enum": [1, 5, 10.5, 20], "minimum": 2, "maximum": 12},
        "const_ref": {"$ref": "#/$defs/word", "const": "hi"}},
      "required": ["typed", "short", "ranged", "const_ref"], "$defs": {"word": {"type": "string", "maxLength": 2}}})"},
    {"one_of_exactly_one", R"({"type": "array", "items": {"oneOf": [
        {"type": "integer"}, {"type": "number", "minimum": -50, "maximum": 50}, {"type": "string", "maxLength": 3},
        {"type": "object", "properties": {"kind": {"const": "a"}}, "required": ["kind"]},
        {"type": "object", "properties": {"kind": {"const": "b"}, "n": {"type": "integer"}}, "required": ["kind", "n"]}]},
      "minItems": 3, "maxItems": 6})"},
    {"ref_siblings", R"({"$defs": {"text": {"type": "string"}, "count": {"type": "integer", "minimum": 0}},
      "type": "object", "properties": {"t": {"$ref": "#/$defs/text", "maxLength": 4, "minLength": 2},
        "c": {"$ref": "#/$defs/count", "maximum": 9}, "n": {"$ref": "#/$defs/count", "nullable": true, "type": ["integer", "null"]}},
      "required": ["t", "c", "n"]})"},
    {"object_keywords", R"({"type": "object", "properties": {
        "id": {"type": "integer", "multipleOf": 3, "minimum": 0}, "card": {"type": "string"}, "billing": {"type": "string"},
        "code": {"type": "string", "pattern": "^[A-Z]+[0-9]{2}$", "minLength": 3, "maxLength": 6}},
      "patternProperties": {"^x-": {"type": "integer", "multipleOf": 5}, "_at$": {"type": "string", "format": "date"}},
      "dependentRequired": {"card": ["billing"]}, "minProperties": 2, "maxProperties": 5, "required": ["id"]})"},
    {"arrays_and_conditionals", R"({"type": "array", "maxItems": 4, "items": {"type": "object", "properties": {
        "tags": {"type": "array", "items": {"enum": ["red", "green", "blue"]}, "uniqueItems": true, "minItems": 1},
        "step": {"type": "number", "multipleOf": 0.25, "minimum": -1, "maximum": 1},
        "kind": {"enum": ["a", "b"]}, "n": {"type": "integer"}},
      "required": ["tags", "kind", "n"],
      "if": {"properties": {"kind": {"const": "a"}}}, "then": {"properties": {"n": {"minimum": 10}}},
      "else": {"properties": {"kind": {"const": "b"}, "n": {"maximum": 0}}}}})"},
    {"definitions_const_nullable", R"({"type": "object", "definitions": {"color": {"type": ["string", "null"], "maxLength": 3}},
        "properties": {"c": {"$ref": "#/definitions/color"}, "v": {"const": {"version": 2}}, "flag": {"type": "boolean"}},
        "required": ["c", "v"], "additionalProperties": false})"},
};

TEST_P(RandomWalk, JsonSchemaOutputsValidateWithAjv) {
  std::vector<testing::SchemaInstances> cases;
  uint64_t seed = 1;
  for (const auto& [name, schema] : kSchemas) {
    SCOPED_TRACE(name);
    auto grammar = CompiledGrammar::compile(GrammarKind::kJsonSchema, schema, vocabulary());
    testing::SchemaInstances c{name, nlohmann::json::parse(schema), {}};
    for (int k = 0; k < kWalksPerGrammar; ++k) c.instances.push_back(random_walk(grammar, seed++));
    cases.push_back(std::move(c));
  }
  testing::expect_valid_with_ajv(cases, "schemas_" + GetParam());
}

TEST_P(RandomWalk, JsonObjectModeOutputsAreObjects) {
  auto grammar = CompiledGrammar::compile(GrammarKind::kJsonObject, "", vocabulary());
  testing::SchemaInstances c{"json_object", nlohmann::json{{"type", "object"}}, {}};
  for (int k = 0; k < 2 * kWalksPerGrammar; ++k) {
    std::string text = random_walk(grammar, 100 + k, {.soft_cap_tokens = 60});
    auto parsed = nlohmann::json::parse(text, nullptr, false);
    EXPECT_TRUE(parsed.is_object()) << text;
    c.instances.push_back(text);
  }
  testing::expect_valid_with_ajv({c}, "json_object_" + GetParam());
}

bool pcre2_full_match(const std::string& pattern, const std::string& text) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.c_str()), PCRE2_ZERO_TERMINATED,
                                   PCRE2_UTF | PCRE2_ANCHORED | PCRE2_ENDANCHORED, &error, &offset, nullptr);
  if (code == nullptr) {
    ADD_FAILURE() << "PCRE2 rejects " << pattern;
    return false;
  }
  pcre2_match_data* data = pcre2_match_data_create_from_pattern(code, nullptr);
  int rc = pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), 0, 0, data, nullptr);
  pcre2_match_data_free(data);
  pcre2_code_free(code);
  return rc >= 0;
}

TEST_P(RandomWalk, RegexOutputsMatchPcre2) {
  const std::vector<std::string> patterns = {
      R"(\d{3}-\d{2}-\d{4})",
      R"([A-Z][a-z]+(?: [A-Z][a-z]+){0,3})",
      R"((?:https?|ftp)://[a-z0-9.-]+\.(?:com|org|net)(?:/[\w.-]*)*)",
      R"(\S+@\S+\.[a-z]{2,4})",
      R"(.{0,20}!)",
      R"([^aeiou\n]{1,15}(ab|cd)*[αβγ]?)",
      R"(-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?)",
      R"((?:[01]\d|2[0-3]):[0-5]\d)",
  };
  uint64_t seed = 500;
  for (const auto& pattern : patterns) {
    SCOPED_TRACE(pattern);
    auto grammar = CompiledGrammar::compile(GrammarKind::kRegex, pattern, vocabulary());
    for (int k = 0; k < kWalksPerGrammar; ++k) {
      std::string text = random_walk(grammar, seed++, {.soft_cap_tokens = 12});
      EXPECT_TRUE(pcre2_full_match(pattern, text)) << "'" << text << "'";
    }
  }
}

// Recursive-descent recognizers for the EBNF grammars below, written from the grammars' definitions.
class Recognizer {
 public:
  explicit Recognizer(const std::string& text) : s_(text) {}
  bool arithmetic() { return expr() && i_ == s_.size(); }
  bool nested_lists() { return list() && i_ == s_.size(); }

 private:
  bool eat(char c) {
    if (i_ < s_.size() && s_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }
  bool digit() { return i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9' && (++i_, true); }
  // expr ::= term (("+" | "-") term)*   term ::= factor (("*" | "/") factor)*
  // factor ::= [0-9]+ | "(" expr ")" | "-" factor
  bool expr() {
    if (!term()) return false;
    while (eat('+') || eat('-')) {
      if (!term()) return false;
    }
    return true;
  }
  bool term() {
    if (!factor()) return false;
    while (eat('*') || eat('/')) {
      if (!factor()) return false;
    }
    return true;
  }
  bool factor() {
    if (digit()) {
      while (digit()) {
      }
      return true;
    }
    if (eat('(')) return expr() && eat(')');
    if (eat('-')) return factor();
    return false;
  }
  // list ::= "[" (elem (", " elem)*)? "]"   elem ::= list | [a-z]+ | "\"" [^"]* "\""
  bool list() {
    if (!eat('[')) return false;
    if (eat(']')) return true;
    do {
      if (!elem()) return false;
    } while (eat(',') && eat(' '));
    return eat(']');
  }
  bool elem() {
    if (i_ < s_.size() && s_[i_] == '[') return list();
    if (eat('"')) {
      while (i_ < s_.size() && s_[i_] != '"') ++i_;
      return eat('"');
    }
    size_t start = i_;
    while (i_ < s_.size() && s_[i_] >= 'a' && s_[i_] <= 'z') ++i_;
    return i_ > start;
  }
  const std::string& s_;
  size_t i_ = 0;
};

TEST_P(RandomWalk, EbnfOutputsParseWithRecursiveDescent) {
  auto arithmetic = CompiledGrammar::compile(GrammarKind::kEbnf, R"g(
      root ::= expr
      expr ::= term (("+" | "-") term)*
      term ::= factor (("*" | "/") factor)*
      factor ::= [0-9]+ | "(" expr ")" | "-" factor)g", vocabulary());
  auto lists = CompiledGrammar::compile(GrammarKind::kEbnf, R"g(
      root ::= list
      list ::= "[" (elem (", " elem)*)? "]"
      elem ::= list | [a-z]+ | "\"" [^"]* "\"")g", vocabulary());
  for (int k = 0; k < 2 * kWalksPerGrammar; ++k) {
    std::string a = random_walk(arithmetic, 900 + k, {.soft_cap_tokens = 30});
    EXPECT_TRUE(Recognizer(a).arithmetic()) << a;
    std::string l = random_walk(lists, 950 + k, {.soft_cap_tokens = 30});
    EXPECT_TRUE(Recognizer(l).nested_lists()) << l;
  }
  // A grammar whose language is also a regex.
  auto words = CompiledGrammar::compile(GrammarKind::kEbnf, R"g(root ::= word (", " word){0,3} "."
      word ::= [a-zA-Zé]+ | [0-9]{2})g", vocabulary());
  for (int k = 0; k < kWalksPerGrammar; ++k) {
    std::string w = random_walk(words, 990 + k, {.soft_cap_tokens = 10});
    EXPECT_TRUE(pcre2_full_match(R"((?:[a-zA-Zé]+|[0-9]{2})(?:, (?:[a-zA-Zé]+|[0-9]{2})){0,3}\.)", w)) << w;
  }
}

INSTANTIATE_TEST_SUITE_P(Vocabularies, RandomWalk, ::testing::Values("qwen3", "llama3"));

}  // namespace
}  // namespace tern::grammar
