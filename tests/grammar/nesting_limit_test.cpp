// Deep nesting from a request (regex groups, EBNF parentheses, stacked quantifiers, rule chains, JSON schemas) is a
// clean tern::Error naming the limit, or compiles without recursing once per level; never a stack overflow. The
// deep inputs are the sizes that overflowed the 8 MiB stack before kMaxNestingDepth, and ten times those.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "core/nesting_limit.h"
#include "grammar/ebnf_parser.h"
#include "grammar/grammar_cache.h"
#include "grammar/json_schema_converter.h"
#include "grammar/pushdown_automaton.h"
#include "grammar/regex_parser.h"
#include "test_vocabulary.h"

namespace tern::grammar {
namespace {

std::string repeated(std::string_view unit, size_t count) {
  std::string out;
  out.reserve(unit.size() * count);
  for (size_t i = 0; i < count; ++i) out += unit;
  return out;
}

std::string nested_groups(size_t depth) { return std::string(depth, '(') + "a" + std::string(depth, ')'); }

std::string compile_error(GrammarKind kind, std::string_view source) {
  try {
    CompiledGrammar::compile(kind, source, testing::tiny_vocabulary());
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

bool matches(GrammarKind kind, std::string_view source, std::string_view text) {
  GrammarMatcher matcher(CompiledGrammar::compile(kind, source, testing::tiny_vocabulary()));
  return matcher.accept_bytes(text) && matcher.is_accepting();
}

const std::string kLimitMessage = nesting_limit_message();

TEST(NestingLimit, DeepRegexGroupsAreAnErrorAtTheirPosition) {
  for (size_t depth : {12'000, 120'000}) {
    const std::string error = compile_error(GrammarKind::kRegex, nested_groups(depth));
    EXPECT_NE(error.find(kLimitMessage), std::string::npos) << error;
    EXPECT_NE(error.find("invalid regular expression at line 1, column 513 "), std::string::npos) << error;
  }
}

TEST(NestingLimit, RegexGroupsUpToTheLimitCompile) {
  EXPECT_TRUE(matches(GrammarKind::kRegex, nested_groups(kMaxNestingDepth), "a"));
  EXPECT_NE(compile_error(GrammarKind::kRegex, nested_groups(kMaxNestingDepth + 1)).find(kLimitMessage), std::string::npos);
}

TEST(NestingLimit, StackedQuantifiersAreAnError) {
  // No parser recursion, but each quantifier wraps the expression once more.
  for (size_t count : {12'000, 120'000}) {
    const std::string regex_error = compile_error(GrammarKind::kRegex, "a" + std::string(count, '*'));
    EXPECT_NE(regex_error.find("expression " + kLimitMessage), std::string::npos) << regex_error;
    const std::string ebnf_error = compile_error(GrammarKind::kEbnf, "root ::= \"a\"" + std::string(count, '?'));
    EXPECT_NE(ebnf_error.find("expression " + kLimitMessage), std::string::npos) << ebnf_error;
  }
}

TEST(NestingLimit, DeepEbnfParenthesesAreAnError) {
  for (size_t depth : {12'000, 120'000}) {
    const std::string error = compile_error(GrammarKind::kEbnf, "root ::= " + std::string(depth, '(') + "\"a\"" +
                                                                     std::string(depth, ')'));
    EXPECT_NE(error.find(kLimitMessage), std::string::npos) << error;
    EXPECT_NE(error.find("invalid grammar at line 1"), std::string::npos) << error;
  }
  // A /regex/ inside a grammar is held to the same limit.
  const std::string in_regex = compile_error(GrammarKind::kEbnf, "root ::= /" + nested_groups(12'000) + "/");
  EXPECT_NE(in_regex.find(kLimitMessage), std::string::npos) << in_regex;
}

std::string rule_chain(size_t num_rules) {
  std::string grammar = "root ::= r0\n";
  for (size_t i = 0; i < num_rules; ++i) grammar += fmt::format("r{} ::= \"a\" r{}\n", i, i + 1);
  return grammar + fmt::format("r{} ::= \"b\"\n", num_rules);
}

TEST(NestingLimit, LongChainsOfInlinedRulesCompile) {
  // r0 ::= "a" r1, r1 ::= "a" r2, ...: sizing and inlining each rule into the one before used to recurse per rule
  // (100,000 rules overflowed the stack).
  EXPECT_NO_THROW(build_pushdown_automaton(parse_ebnf(rule_chain(100'000))));
  // Small enough to inline whole, but past kMaxNestingDepth levels of inlining the rest stays a call.
  constexpr size_t kNumRules = 4 * kMaxNestingDepth;
  const std::string grammar = rule_chain(kNumRules);
  EXPECT_GT(build_pushdown_automaton(parse_ebnf(grammar)).rule_start.size(), 1u);
  EXPECT_TRUE(matches(GrammarKind::kEbnf, grammar, std::string(kNumRules, 'a') + "b"));
  EXPECT_FALSE(matches(GrammarKind::kEbnf, grammar, std::string(kNumRules - 1, 'a') + "b"));
  EXPECT_FALSE(matches(GrammarKind::kEbnf, grammar, std::string(kNumRules + 1, 'a') + "b"));
}

TEST(NestingLimit, LongChainsOfLeftCallsAreCheckedWithoutRecursion) {
  // One cycle of recursive rules (each a rule of the automaton), each calling the next before any byte (160,000
  // overflowed the stack of the search for left recursion).
  constexpr size_t kNumRules = 160'000;
  std::string grammar = "root ::= r0\n";
  for (size_t i = 0; i < kNumRules; ++i) grammar += fmt::format("r{} ::= r{} \"a\" | \"b\"\n", i, i + 1);
  const std::string last_rule = fmt::format("r{} ::= ", kNumRules);
  grammar += last_rule + "\"c\" r0 | \"d\"\n";
  EXPECT_NO_THROW(build_pushdown_automaton(parse_ebnf(grammar)));
  // The same chain closed into a left cycle is refused, by name.
  const std::string left_cycle = grammar.substr(0, grammar.rfind(last_rule)) + last_rule + "r0 \"c\" | \"d\"\n";
  try {
    build_pushdown_automaton(parse_ebnf(left_cycle));
    ADD_FAILURE() << "a left cycle compiled";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("left recursion"), std::string::npos) << e.what();
  }
}

TEST(NestingLimit, DeepJsonSchemaTextIsAnError) {
  // Once parsed, copying the nullable schema recursed once per level of "x".
  for (size_t depth : {74'000, 740'000}) {
    const std::string schema = R"({"nullable": true, "x": )" + std::string(depth, '[') + std::string(depth, ']') + "}";
    const std::string error = compile_error(GrammarKind::kJsonSchema, schema);
    EXPECT_NE(error.find("invalid JSON schema: JSON " + kLimitMessage), std::string::npos) << error;
  }
}

TEST(NestingLimit, DeepSchemaPatternIsAnError) {
  const std::string schema = R"({"type": "string", "pattern": ")" + nested_groups(12'000) + R"("})";
  const std::string error = compile_error(GrammarKind::kJsonSchema, schema);
  EXPECT_NE(error.find("/pattern"), std::string::npos) << error;
  EXPECT_NE(error.find(kLimitMessage), std::string::npos) << error;
}

TEST(NestingLimit, LongRefChainsAreAnErrorNamingThePath) {
  std::string defs;
  for (int i = 0; i < 2 * kMaxNestingDepth; ++i) {
    defs += fmt::format(R"("d{}": {{"$ref": "#/$defs/d{}"}}, )", i, i + 1);
  }
  defs += fmt::format(R"("d{}": {{"type": "integer"}})", 2 * kMaxNestingDepth);
  const std::string error = compile_error(GrammarKind::kJsonSchema, R"({"$ref": "#/$defs/d0", "$defs": {)" + defs + "}}");
  EXPECT_NE(error.find("schema " + kLimitMessage), std::string::npos) << error;
  EXPECT_NE(error.find("at '/$defs/d"), std::string::npos) << error;
}

TEST(NestingLimit, LongPropertyNamesBesideAdditionalPropertiesAreAnError) {
  // The key grammar that excludes declared names spells each name out one nested level per character.
  const std::string schema = R"({"type": "object", "properties": {")" + std::string(50'000, 'k') +
                             R"(": {"type": "integer"}}, "additionalProperties": true})";
  const std::string error = compile_error(GrammarKind::kJsonSchema, schema);
  EXPECT_NE(error.find(kLimitMessage), std::string::npos) << error;
  EXPECT_NE(error.find("at '/properties'"), std::string::npos) << error;
}

TEST(NestingLimit, ManyTupleItemsConvertWithoutRecursion) {
  constexpr size_t kNumItems = 100'000;
  const std::string items = repeated(R"({"type": "null"}, )", kNumItems - 1) + R"({"type": "null"})";
  const std::string schema = fmt::format(R"({{"type": "array", "prefixItems": [{}], "minItems": {}, "items": false}})",
                                         items, kNumItems);
  const std::string ebnf = json_schema_to_ebnf(std::string_view(schema));
  EXPECT_EQ(parse_ebnf(ebnf).rules.empty(), false);
}

TEST(NestingLimit, ManyOptionalPropertiesStayOneFlatChoice) {
  // Each optional property used to open one more level of "(... | ...)" around the next.
  constexpr int kNumProperties = kMaxNestingDepth + 100;
  std::string properties;
  for (int i = 0; i < kNumProperties; ++i) properties += fmt::format(R"({}"p{}": {{"type": "null"}})", i ? ", " : "", i);
  const std::string schema = R"({"type": "object", "properties": {)" + properties + "}}";
  // Each optional property before the first required one repeats the rest, so this many take more than the
  // converter's grammar size limit: refused by size, with no nesting error.
  try {
    parse_ebnf(json_schema_to_ebnf(std::string_view(schema)));
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("properties would exceed 4 MiB"), std::string::npos) << e.what();
  }
  const std::string small = R"({"type": "object", "properties": {"a": {"type": "null"}, "b": {"type": "null"}}})";
  for (const char* text : {"{}", R"({"a": null})", R"({"b": null})", R"({"a": null, "b": null})"}) {
    EXPECT_TRUE(matches(GrammarKind::kJsonSchema, small, text)) << text;
  }
  EXPECT_FALSE(matches(GrammarKind::kJsonSchema, small, R"({"b": null, "a": null})"));
}

}  // namespace
}  // namespace tern::grammar
