// Byte-level behaviour of the grammar engine on small grammars and a tiny vocabulary, checked against definitions.
#include <gtest/gtest.h>

#include <thread>

#include "core/error.h"
#include "grammar/grammar_cache.h"
#include "grammar/integer_range.h"
#include "test_vocabulary.h"

namespace tern::grammar {
namespace {

using testing::tiny_vocabulary;

std::shared_ptr<const CompiledGrammar> compile(GrammarKind kind, std::string_view source,
                                               std::vector<std::string> extra_tokens = {}) {
  return CompiledGrammar::compile(kind, source, tiny_vocabulary(std::move(extra_tokens)));
}

// Whether the grammar matches the whole text.
bool matches(const std::shared_ptr<const CompiledGrammar>& grammar, std::string_view text) {
  GrammarMatcher matcher(grammar);
  return matcher.accept_bytes(text) && matcher.is_accepting();
}

bool ebnf_matches(std::string_view ebnf, std::string_view text) { return matches(compile(GrammarKind::kEbnf, ebnf), text); }

std::string error_of(GrammarKind kind, std::string_view source) {
  try {
    compile(kind, source);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Ebnf, SequencesAlternativesAndQuantifiers) {
  const char* g = R"(
    root ::= "a" middle* ("c" | "d"){1,2} end?   # comment
    middle ::= [x-z] | "-"
    end ::= '!')";
  EXPECT_TRUE(ebnf_matches(g, "ac"));
  EXPECT_TRUE(ebnf_matches(g, "ax-zcd!"));
  EXPECT_FALSE(ebnf_matches(g, "a"));
  EXPECT_FALSE(ebnf_matches(g, "acdc"));
  EXPECT_FALSE(ebnf_matches(g, "awc"));
  EXPECT_FALSE(ebnf_matches(g, "ac!!"));
}

TEST(Ebnf, LarkStyleRulesAndRegexLiterals) {
  const char* g = "root: greeting \" \" /[0-9]{2,3}/ ;\ngreeting: \"hi\" | \"yo\"";
  EXPECT_TRUE(ebnf_matches(g, "hi 42"));
  EXPECT_TRUE(ebnf_matches(g, "yo 123"));
  EXPECT_FALSE(ebnf_matches(g, "hi 4"));
  EXPECT_FALSE(ebnf_matches(g, "hey 42"));
}

TEST(Ebnf, EscapesInStringsAndClasses) {
  EXPECT_TRUE(ebnf_matches(R"(root ::= "\"\\\n\t\x41\u00e9")", "\"\\\n\tA\xC3\xA9"));
  EXPECT_TRUE(ebnf_matches(R"(root ::= [\]\-\\]+)", "]-\\"));
  EXPECT_FALSE(ebnf_matches(R"(root ::= [\]\-\\]+)", "a"));
}

TEST(Ebnf, Utf8ClassesMatchWholeCharacters) {
  const char* greek = "root ::= [α-ω]+";
  EXPECT_TRUE(ebnf_matches(greek, "αβγω"));
  EXPECT_FALSE(ebnf_matches(greek, "a"));
  EXPECT_FALSE(ebnf_matches(greek, "Ω"));
  const char* not_a = "root ::= [^a]";
  for (const char* ok : {"b", "é", "日", "😀", "\x7F", "\xEF\xBF\xBF"}) EXPECT_TRUE(ebnf_matches(not_a, ok)) << ok;
  EXPECT_FALSE(ebnf_matches(not_a, "a"));
  EXPECT_FALSE(ebnf_matches(not_a, "\xED\xA0\x80"));  // an encoded surrogate is not UTF-8
  EXPECT_FALSE(ebnf_matches(not_a, "\xC0\x80"));      // overlong
  EXPECT_FALSE(ebnf_matches(not_a, "\xF4\x90\x80\x80"));  // above U+10FFFF
  const char* any = "root ::= .{3}";
  EXPECT_TRUE(ebnf_matches(any, "a😀日"));
  EXPECT_FALSE(ebnf_matches(any, "a😀"));
  // Half a character is a valid prefix but not a complete match.
  GrammarMatcher m(compile(GrammarKind::kEbnf, not_a));
  EXPECT_TRUE(m.accept_bytes("\xE6\x97"));
  EXPECT_FALSE(m.is_accepting());
  EXPECT_TRUE(m.accept_bytes("\xA5"));
  EXPECT_TRUE(m.is_accepting());
}

TEST(Ebnf, RecursionBalancedParentheses) {
  const char* g = R"g(root ::= item*
                     item ::= "(" item* ")" | "x")g";
  EXPECT_TRUE(ebnf_matches(g, ""));
  EXPECT_TRUE(ebnf_matches(g, "(()x(x))x"));
  EXPECT_FALSE(ebnf_matches(g, "(()"));
  EXPECT_FALSE(ebnf_matches(g, "())"));
  GrammarMatcher m(compile(GrammarKind::kEbnf, g));
  EXPECT_TRUE(m.accept_bytes("((("));
  EXPECT_EQ(m.min_bytes_to_accept(), 3u);
}

// A rule whose inlined expansion would pass the automaton's limits (200 strings of up to 2,000 letters: millions of
// states) calls its largest callee instead of copying it.
TEST(Ebnf, LargeRulesCallTheirLargestCallees) {
  const char* ebnf = "root ::= \"[\" s (\",\" s){0,199} \"]\"\ns ::= \"'\" [a-z]{0,2000} \"'\"";
  EXPECT_TRUE(ebnf_matches(ebnf, "['abc','','" + std::string(2000, 'x') + "']"));
  EXPECT_FALSE(ebnf_matches(ebnf, "['" + std::string(2001, 'x') + "']"));
  std::string many = "[''";
  for (int i = 0; i < 199; ++i) many += ",'z'";
  EXPECT_TRUE(ebnf_matches(ebnf, many + "]"));
  EXPECT_FALSE(ebnf_matches(ebnf, many + ",'z']"));
}

TEST(Ebnf, ErrorsNamePositionAndExpectation) {
  EXPECT_NE(error_of(GrammarKind::kEbnf, "root ::= \"abc").find("line 1, column 10"), std::string::npos);
  EXPECT_NE(error_of(GrammarKind::kEbnf, "root ::= \"abc").find("expected"), std::string::npos);
  std::string undefined = error_of(GrammarKind::kEbnf, "root ::= a\n  | missing");
  EXPECT_NE(undefined.find("'a' is used but never defined"), std::string::npos) << undefined;
  EXPECT_NE(error_of(GrammarKind::kEbnf, "start ::= \"a\"").find("'root' rule"), std::string::npos);
  EXPECT_NE(error_of(GrammarKind::kEbnf, "root ::= \"a\"{3,1}").find("n < m"), std::string::npos);
  EXPECT_NE(error_of(GrammarKind::kEbnf, "root ::= \"a\"\nroot ::= \"b\"").find("line 2, column 1"), std::string::npos);
  EXPECT_NE(error_of(GrammarKind::kEbnf, "root ::= ( \"a\"").find("expected ')'"), std::string::npos);
  EXPECT_NE(error_of(GrammarKind::kEbnf, "root ::= [b-a]").find("out of order"), std::string::npos);
  EXPECT_NE(error_of(GrammarKind::kEbnf, "root ::= root \"a\" | \"a\"").find("left recursion"), std::string::npos);
  EXPECT_NE(error_of(GrammarKind::kEbnf, "root ::= x\nx ::= \"a\" x").find("matches no finite string"), std::string::npos);
}

TEST(Regex, PracticalSubset) {
  auto r = [](const char* pattern, const char* text) { return matches(compile(GrammarKind::kRegex, pattern), text); };
  EXPECT_TRUE(r(R"(^\d{3}-[a-z]+$)", "123-abc"));
  EXPECT_FALSE(r(R"(\d{3}-[a-z]+)", "12-abc"));
  EXPECT_TRUE(r(R"((?:ab|cd)+\.?)", "abcdab."));
  EXPECT_TRUE(r(R"(\w+\s\W)", "a_9 !"));
  EXPECT_FALSE(r(R"(\w+\s\W)", "a_9 b"));
  EXPECT_TRUE(r(R"([^\d\s]{2})", "é!"));
  EXPECT_TRUE(r("a.c", "a😀c"));
  EXPECT_FALSE(r("a.c", "a\nc"));
  EXPECT_TRUE(r(R"((?<year>\d{4})-x{2,}?)", "2024-xxx"));
  EXPECT_TRUE(r(R"(\u00e9\x41\u{1F600})", "éA😀"));
}

TEST(Regex, ErrorsNamePosition) {
  EXPECT_NE(error_of(GrammarKind::kRegex, "(ab").find("offset 0"), std::string::npos);
  EXPECT_NE(error_of(GrammarKind::kRegex, "ab)").find("unmatched ')'"), std::string::npos);
  EXPECT_NE(error_of(GrammarKind::kRegex, "a(?=b)").find("lookaround"), std::string::npos);
  EXPECT_NE(error_of(GrammarKind::kRegex, R"((a)\1)").find("backreferences"), std::string::npos);
  EXPECT_NE(error_of(GrammarKind::kRegex, "[abc").find("expected ']'"), std::string::npos);
  EXPECT_NE(error_of(GrammarKind::kRegex, "*a").find("nothing to repeat"), std::string::npos);
  std::string in_ebnf = error_of(GrammarKind::kEbnf, "root ::= \"x\"\n  /a(/");
  EXPECT_NE(in_ebnf.find("line 2, column 3"), std::string::npos) << in_ebnf;
}

TEST(JsonSchema, ErrorsNameThePath) {
  EXPECT_NE(error_of(GrammarKind::kJsonSchema, R"({"type": "object",)").find("not valid JSON"), std::string::npos);
  std::string unsupported = error_of(GrammarKind::kJsonSchema, R"({"properties": {"a": {"type": "string", "not": {"pattern": "x"}}}})");
  EXPECT_NE(unsupported.find("/properties/a"), std::string::npos) << unsupported;
  EXPECT_NE(unsupported.find("'not'"), std::string::npos) << unsupported;
  std::string bad_ref = error_of(GrammarKind::kJsonSchema, R"({"$ref": "#/$defs/missing"})");
  EXPECT_NE(bad_ref.find("does not resolve"), std::string::npos) << bad_ref;
  std::string bad_pattern = error_of(GrammarKind::kJsonSchema, R"({"type": "string", "pattern": "a(b"})");
  EXPECT_NE(bad_pattern.find("/pattern"), std::string::npos) << bad_pattern;
  EXPECT_NE(error_of(GrammarKind::kJsonSchema, R"({"type": "array", "minItems": 3, "maxItems": 2})").find("minItems"),
            std::string::npos);
}

// The mask must equal "accept_token succeeds" for every token, including tokens that cross rule ends (the
// context-dependent ones) and EOS.
TEST(Matcher, MaskEqualsAcceptForEveryToken) {
  const char* g = R"(root ::= list
                     list ::= "[" (item ("," item)*)? "]"
                     item ::= list | [a-c]+)";
  std::vector<std::string> extra = {"[]", "],", "]]", "a,", "ab]", "[[", ",[", "c],[", "]x", "ba"};
  auto grammar = compile(GrammarKind::kEbnf, g, extra);
  for (const char* prefix : {"", "[", "[[a", "[a,[b", "[[]", "[a,[b],c", "[[[]]]"}) {
    GrammarMatcher m(grammar);
    ASSERT_TRUE(m.accept_bytes(prefix)) << prefix;
    std::vector<uint32_t> mask = m.next_token_bitmask();
    for (size_t id = 0; id < grammar->vocabulary().size(); ++id) {
      bool accepted = m.accept_token(static_cast<int32_t>(id));
      if (accepted) m.rollback(1);
      EXPECT_EQ(bitmask_test(mask, static_cast<int32_t>(id)), accepted) << "prefix '" << prefix << "' token " << id;
    }
  }
}

TEST(Matcher, RollbackRestoresState) {
  auto grammar = compile(GrammarKind::kEbnf, R"g(root ::= "(" root ")" | "x")g", {"((", "))"});
  GrammarMatcher m(grammar, 8);
  std::vector<uint32_t> initial = m.next_token_bitmask();
  const TokenVocabulary& v = grammar->vocabulary();
  int32_t open2 = 256, close2 = 257, eos = v.eos_ids()[0];
  ASSERT_TRUE(m.accept_token(open2));
  ASSERT_TRUE(m.accept_token('('));
  ASSERT_TRUE(m.accept_token('x'));
  EXPECT_FALSE(m.accept_token(eos));
  std::vector<uint32_t> after_x = m.next_token_bitmask();
  ASSERT_TRUE(m.accept_token(close2));
  ASSERT_TRUE(m.accept_token(')'));
  EXPECT_TRUE(m.is_accepting());
  ASSERT_TRUE(m.accept_token(eos));
  EXPECT_TRUE(m.is_terminated());
  EXPECT_FALSE(m.accept_token('x'));
  m.rollback(3);
  EXPECT_FALSE(m.is_terminated());
  EXPECT_EQ(m.next_token_bitmask(), after_x);
  m.rollback(3);
  EXPECT_EQ(m.next_token_bitmask(), initial);
  EXPECT_THROW(m.rollback(1), Error);
}

TEST(IntegerRange, MatchesExactlyTheRange) {
  std::mt19937 rng(7);
  std::vector<std::pair<int64_t, int64_t>> ranges = {{0, 0}, {-5, 5}, {7, 123}, {-1000, -37}, {99, 1001}, {1, 9}};
  for (int k = 0; k < 6; ++k) {
    int64_t a = static_cast<int64_t>(rng() % 4000) - 2000, b = a + static_cast<int64_t>(rng() % 3000);
    ranges.push_back({a, b});
  }
  for (auto [lo, hi] : ranges) {
    auto grammar = compile(GrammarKind::kEbnf, "root ::= " + integer_range_ebnf(lo, hi));
    for (int64_t v = lo - 30; v <= hi + 30; ++v) {
      if (v > lo + 200 && v < hi - 200) v = hi - 200;
      EXPECT_EQ(matches(grammar, std::to_string(v)), v >= lo && v <= hi) << v << " in [" << lo << "," << hi << "]";
    }
    EXPECT_FALSE(matches(grammar, "-0"));
    EXPECT_FALSE(matches(grammar, "01"));
  }
  auto at_least = compile(GrammarKind::kEbnf, "root ::= " + integer_range_ebnf(-20, std::nullopt));
  EXPECT_TRUE(matches(at_least, "9999999999999999"));
  EXPECT_FALSE(matches(at_least, "-21"));
  EXPECT_TRUE(matches(at_least, "-20"));
}

TEST(GrammarCache, SharesCompiledGrammarsAcrossThreads) {
  GrammarCache cache(tiny_vocabulary(), 2);
  std::vector<std::shared_ptr<const CompiledGrammar>> results(8);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < results.size(); ++t) {
    threads.emplace_back([&, t] { results[t] = cache.get(GrammarKind::kRegex, "[a-z]+"); });
  }
  for (auto& t : threads) t.join();
  for (const auto& r : results) EXPECT_EQ(r, results[0]);
  EXPECT_EQ(cache.num_misses(), 1u);
  EXPECT_NE(cache.get(GrammarKind::kEbnf, "root ::= [a-z]+"), results[0]);  // same text, other kind
  EXPECT_THROW(cache.get(GrammarKind::kRegex, "(("), Error);
  EXPECT_THROW(cache.get(GrammarKind::kRegex, "(("), Error);  // errors are not cached
  cache.get(GrammarKind::kRegex, "x");
  EXPECT_LE(cache.size(), 2u);
}

}  // namespace
}  // namespace tern::grammar
