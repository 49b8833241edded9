#pragma once
// The grammar AST shared by the three front ends (EBNF, regex, JSON Schema): rules whose bodies are expressions over
// Unicode code points. The pushdown-automaton compiler lowers it to bytes (UTF-8).
#include <cstdint>
#include <string>
#include <vector>

namespace tern::grammar {

inline constexpr uint32_t kMaxCodepoint = 0x10FFFF;
inline constexpr uint32_t kUnboundedRepeat = UINT32_MAX;

// Inclusive code point range.
struct CodepointRange {
  uint32_t lo = 0;
  uint32_t hi = 0;
  bool operator==(const CodepointRange&) const = default;
};

enum class ExprKind { kEmpty, kLiteral, kCharClass, kRuleRef, kSequence, kChoice, kRepeat };

struct Expr {
  ExprKind kind = ExprKind::kEmpty;
  std::string literal;                 // kLiteral: UTF-8 bytes
  std::vector<CodepointRange> ranges;  // kCharClass: sorted, disjoint, non-adjacent, no surrogates
  uint32_t rule = 0;                   // kRuleRef: index into Grammar::rules
  std::vector<Expr> children;          // kSequence, kChoice; kRepeat has exactly one
  uint32_t min_repeat = 0;             // kRepeat
  uint32_t max_repeat = 0;             // kRepeat; kUnboundedRepeat for no upper bound
  // Levels of this tree (1 for a leaf). The factories refuse to build past kMaxNestingDepth (core/nesting_limit.h),
  // so every recursive walk of an expression (lowering, printing, destruction) stays shallow: stacked quantifiers
  // such as "a****" deepen it without any parser recursing.
  uint32_t depth = 1;

  static Expr empty() { return Expr{}; }
  static Expr literal_bytes(std::string bytes);
  static Expr char_class(std::vector<CodepointRange> ranges, bool negated);
  static Expr rule_ref(uint32_t rule);
  // These three throw tern::Error when the result would be deeper than kMaxNestingDepth.
  static Expr sequence(std::vector<Expr> items);
  static Expr choice(std::vector<Expr> alternatives);
  static Expr repeat(Expr body, uint32_t min_count, uint32_t max_count);
};

struct Rule {
  std::string name;
  Expr body;
};

struct Grammar {
  std::vector<Rule> rules;
  uint32_t root = 0;
};

// Sorts and merges ranges, removes the UTF-16 surrogates (not encodable in UTF-8) and complements when negated.
std::vector<CodepointRange> normalize_ranges(std::vector<CodepointRange> ranges, bool negated);

// Appends the UTF-8 encoding of a code point (which must be a valid scalar value).
void append_utf8(std::string& out, uint32_t codepoint);

// EBNF text of an expression, parseable by parse_ebnf (rule references print as their names).
std::string to_ebnf(const Expr& expr, const Grammar* grammar = nullptr);
std::string to_ebnf(const Grammar& grammar);

}  // namespace tern::grammar
