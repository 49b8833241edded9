#pragma once
// JSON Schema "pattern" (ECMAScript regular expressions, unanchored: a string is valid when the pattern matches
// somewhere in it) on top of the regex front end, whose patterns always match whole strings.
#include <optional>
#include <string>
#include <string_view>

#include "grammar/grammar_expr.h"
#include "grammar/pushdown_automaton.h"

namespace tern::grammar {

// The strings a schema generates for a pattern: whole matches of it, a subset of the strings it is found in.
// '^' and '$' may stand only at the start and end of the pattern or of one of its top-level alternatives (where a
// whole match satisfies them); anywhere else they would make whole matches invalid, and are an error.
// json_string_escaping as in RegexOptions.
Expr schema_pattern_expr(std::string_view pattern, bool json_string_escaping);

// Whole matches of the pattern whose length in code points lies in [min_len, max_len] (minLength/maxLength beside
// a pattern), JSON-escaped. Lengths are imposed by narrowing repetition counts, so this works where the parts that
// vary in length repeat something of fixed length ("[a-z]+", "x{2,}") or are optional; where several parts of an
// alternative vary, each gets a share of the lengths (a subset of the whole matches that fit). nullopt otherwise.
// Throws tern::Error when no whole match has such a length.
std::optional<Expr> schema_pattern_expr_with_length(std::string_view pattern, uint64_t min_len,
                                                    std::optional<uint64_t> max_len);

// The texts the pattern is found in (with anchors on some top-level alternatives only: its whole matches, a subset).
Expr schema_pattern_found_expr(std::string_view pattern, bool json_string_escaping);

// Whether a pattern occurs in texts (UTF-8), as JSON Schema validators decide it. A pattern with anchors on some of
// its top-level alternatives ("^a|b") is decided conservatively: found only in a text it matches whole. Construction throws tern::Error for a pattern the regex front
// end cannot parse (or with misplaced anchors, as above).
class SchemaPatternSearch {
 public:
  explicit SchemaPatternSearch(std::string_view pattern);
  bool found_in(std::string_view text) const;
  // Whether found_in is exact; otherwise "not found" may be wrong (a text with the pattern inside, not whole).
  bool exact() const { return !whole_matches_only_; }
  // The automaton of the texts the pattern is found in (exactly those when exact()).
  const PushdownAutomaton& dfa() const { return dfa_; }

 private:
  bool whole_matches_only_ = false;
  PushdownAutomaton dfa_;  // one rule, no calls: a plain DFA over bytes
};

// Whether some text of schema_pattern_found_expr(pattern) is a text that `other` is found in; true where that is not
// decided (the automata are too large to compare, or `other` has anchors on some alternatives only).
bool pattern_matches_may_contain(std::string_view pattern, std::string_view other);

}  // namespace tern::grammar
