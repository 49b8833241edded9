#include "grammar/json_schema_pattern.h"

#include <algorithm>
#include <set>
#include <utility>
#include <vector>

#include "core/error.h"
#include "grammar/regex_parser.h"

namespace tern::grammar {
namespace {

struct Anchors {
  bool any = false;
  bool at_start = false;           // '^' at offset 0
  bool at_end = false;             // '$' as the last character
  bool top_level_alternation = false;
};

// Where the pattern has '^' and '$' outside character classes; throws for one that a whole match cannot satisfy.
Anchors find_anchors(std::string_view pattern) {
  Anchors anchors;
  bool in_class = false;
  int depth = 0;
  for (size_t i = 0; i < pattern.size(); ++i) {
    char c = pattern[i];
    if (c == '\\') {
      ++i;
      continue;
    }
    if (in_class) {
      in_class = c != ']';
      continue;
    }
    if (c == '[') in_class = true;
    if (c == '(') ++depth;
    if (c == ')') --depth;
    if (c == '|' && depth == 0) anchors.top_level_alternation = true;
    if (c != '^' && c != '$') continue;
    anchors.any = true;
    bool at_alternative_start = i == 0 || pattern[i - 1] == '|';
    bool at_alternative_end = i + 1 == pattern.size() || pattern[i + 1] == '|';
    bool placed = depth == 0 && (c == '^' ? at_alternative_start : at_alternative_end);
    if (!placed) {
      fail("'{}' at offset {} is only supported at the start or end of the pattern (or of a top-level alternative)", c, i);
    }
    anchors.at_start |= c == '^' && i == 0;
    anchors.at_end |= c == '$' && i + 1 == pattern.size();
  }
  return anchors;
}

// A regex whose whole matches are the texts the pattern is found in; `exact` false where they are only its whole
// matches. The regex front end matches whole strings and ignores anchors, so an unanchored end becomes "anything".
std::string found_regex(std::string_view pattern, bool& exact) {
  Anchors anchors = find_anchors(pattern);
  parse_regex(pattern);  // errors name offsets in the pattern as written
  exact = !(anchors.any && anchors.top_level_alternation);
  std::string whole = !exact || anchors.at_start ? "" : "[\\s\\S]*";
  whole += "(?:" + std::string(pattern) + ")";
  if (exact && !anchors.at_end) whole += "[\\s\\S]*";
  return whole;
}

constexpr uint64_t kUnboundedLength = UINT64_MAX;

struct LengthRange {
  uint64_t lo = 0;
  uint64_t hi = 0;  // kUnboundedLength: no bound
};

uint64_t num_codepoints(const std::string& bytes) {
  uint64_t count = 0;
  for (char c : bytes) count += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return count;
}

uint64_t saturating_add(uint64_t a, uint64_t b) { return a > kUnboundedLength - b ? kUnboundedLength : a + b; }
uint64_t saturating_mul(uint64_t a, uint64_t b) { return a != 0 && b > kUnboundedLength / a ? kUnboundedLength : a * b; }

LengthRange length_range(const Expr& e) {
  switch (e.kind) {
    case ExprKind::kEmpty: return {0, 0};
    case ExprKind::kLiteral: return {num_codepoints(e.literal), num_codepoints(e.literal)};
    case ExprKind::kCharClass: return {1, 1};
    case ExprKind::kRuleRef: return {0, kUnboundedLength};
    case ExprKind::kSequence: {
      LengthRange total;
      for (const auto& c : e.children) {
        LengthRange r = length_range(c);
        total = {saturating_add(total.lo, r.lo), saturating_add(total.hi, r.hi)};
      }
      return total;
    }
    case ExprKind::kChoice: {
      LengthRange total{kUnboundedLength, 0};
      for (const auto& c : e.children) {
        LengthRange r = length_range(c);
        total = {std::min(total.lo, r.lo), std::max(total.hi, r.hi)};
      }
      return total;
    }
    case ExprKind::kRepeat: {
      LengthRange body = length_range(e.children[0]);
      uint64_t max_count = e.max_repeat == kUnboundedRepeat ? kUnboundedLength : e.max_repeat;
      return {saturating_mul(body.lo, e.min_repeat), body.hi == 0 ? 0 : saturating_mul(body.hi, max_count)};
    }
  }
  return {0, kUnboundedLength};
}

struct Restricted {
  bool expressible = true;
  std::optional<Expr> expr;  // nullopt: no string of the wanted length
};

// The strings of `e` with length in [lo, hi].
Restricted restrict_length(const Expr& e, uint64_t lo, uint64_t hi) {
  LengthRange r = length_range(e);
  if (r.lo >= lo && r.hi <= hi) return {true, e};
  if (r.hi < lo || r.lo > hi) return {true, std::nullopt};
  if (e.kind == ExprKind::kChoice) {
    std::vector<Expr> kept;
    for (const auto& c : e.children) {
      Restricted sub = restrict_length(c, lo, hi);
      if (!sub.expressible) return {false, std::nullopt};
      if (sub.expr) kept.push_back(std::move(*sub.expr));
    }
    if (kept.empty()) return {true, std::nullopt};
    return {true, kept.size() == 1 ? std::move(kept[0]) : Expr::choice(std::move(kept))};
  }
  if (e.kind == ExprKind::kSequence) {
    std::vector<size_t> variable;
    std::vector<LengthRange> ranges;
    uint64_t fixed = 0;
    for (size_t i = 0; i < e.children.size(); ++i) {
      ranges.push_back(length_range(e.children[i]));
      if (ranges[i].lo == ranges[i].hi) {
        fixed = saturating_add(fixed, ranges[i].lo);
      } else {
        variable.push_back(i);
      }
    }
    if (variable.empty() || fixed > hi) return {true, std::nullopt};
    const uint64_t want_lo = lo > fixed ? lo - fixed : 0;
    const uint64_t want_hi = hi == kUnboundedLength ? hi : hi - fixed;
    // Several parts vary: each gets a share of the lengths (a subset of the strings whose length fits). Minimums
    // are raised front to back until they add up to want_lo; the room above them is split evenly.
    std::vector<uint64_t> part_lo, part_hi;
    uint64_t sum_lo = 0;
    for (size_t v : variable) part_lo.push_back(ranges[v].lo), sum_lo = saturating_add(sum_lo, ranges[v].lo);
    for (size_t k = 0; k < variable.size() && sum_lo < want_lo; ++k) {
      uint64_t add = std::min(want_lo - sum_lo, ranges[variable[k]].hi - part_lo[k]);
      part_lo[k] += add;
      sum_lo += add;
    }
    if (sum_lo < want_lo || sum_lo > want_hi) return {true, std::nullopt};
    const uint64_t room = want_hi == kUnboundedLength ? 0 : want_hi - sum_lo;
    for (size_t k = 0; k < variable.size(); ++k) {
      uint64_t share = room / variable.size() + (k < room % variable.size() ? 1 : 0);
      part_hi.push_back(want_hi == kUnboundedLength ? ranges[variable[k]].hi
                                                    : std::min(ranges[variable[k]].hi, part_lo[k] + share));
    }
    if (variable.size() == 1) part_lo[0] = want_lo, part_hi[0] = want_hi;  // one part: exactly the lengths that fit
    std::vector<Expr> items = e.children;
    for (size_t k = 0; k < variable.size(); ++k) {
      Restricted sub = restrict_length(e.children[variable[k]], part_lo[k], part_hi[k]);
      if (!sub.expressible) return sub;
      if (!sub.expr) return {variable.size() == 1, std::nullopt};  // a share no string has: not this way
      items[variable[k]] = std::move(*sub.expr);
    }
    return {true, Expr::sequence(std::move(items))};
  }
  if (e.kind == ExprKind::kRepeat) {
    LengthRange body = length_range(e.children[0]);
    if (body.lo != body.hi && e.min_repeat == 0 && e.max_repeat == 1) {  // an optional part of varying length
      Restricted sub = restrict_length(e.children[0], lo, hi);
      if (!sub.expressible || lo > 0) return sub;
      return {true, sub.expr ? Expr::repeat(std::move(*sub.expr), 0, 1) : Expr::empty()};
    }
    if (body.lo != body.hi || body.lo == 0) return {false, std::nullopt};
    uint64_t min_count = std::max<uint64_t>(e.min_repeat, (lo + body.lo - 1) / body.lo);
    uint64_t max_count = e.max_repeat == kUnboundedRepeat ? kUnboundedLength : e.max_repeat;
    if (hi != kUnboundedLength) max_count = std::min(max_count, hi / body.lo);
    if (min_count > max_count) return {true, std::nullopt};
    if (max_count != kUnboundedLength && max_count >= kUnboundedRepeat) return {false, std::nullopt};
    return {true, Expr::repeat(e.children[0], static_cast<uint32_t>(min_count),
                               max_count == kUnboundedLength ? kUnboundedRepeat : static_cast<uint32_t>(max_count))};
  }
  return {false, std::nullopt};
}

// The expression over JSON-escaped text (as RegexOptions::json_string_escaping builds it) of a raw one.
Expr json_escaped(const Expr& e) {
  switch (e.kind) {
    case ExprKind::kLiteral: {
      std::vector<Expr> items;
      for (size_t i = 0; i < e.literal.size();) {
        auto b = static_cast<unsigned char>(e.literal[i]);
        size_t len = b < 0x80 ? 1 : b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : 2;
        uint32_t cp = len == 1 ? b : len == 2 ? b & 0x1F : len == 3 ? b & 0x0F : b & 0x07;
        for (size_t k = 1; k < len && i + k < e.literal.size(); ++k) cp = (cp << 6) | (static_cast<unsigned char>(e.literal[i + k]) & 0x3F);
        items.push_back(json_escaped_char_set({{cp, cp}}));
        i += len;
      }
      return items.size() == 1 ? std::move(items[0]) : Expr::sequence(std::move(items));
    }
    case ExprKind::kCharClass: return json_escaped_char_set(e.ranges);
    case ExprKind::kSequence:
    case ExprKind::kChoice: {
      std::vector<Expr> children;
      for (const auto& c : e.children) children.push_back(json_escaped(c));
      return e.kind == ExprKind::kSequence ? Expr::sequence(std::move(children)) : Expr::choice(std::move(children));
    }
    case ExprKind::kRepeat: return Expr::repeat(json_escaped(e.children[0]), e.min_repeat, e.max_repeat);
    default: return e;
  }
}

}  // namespace

std::optional<Expr> schema_pattern_expr_with_length(std::string_view pattern, uint64_t min_len,
                                                    std::optional<uint64_t> max_len) {
  Restricted restricted = restrict_length(schema_pattern_expr(pattern, false), min_len, max_len.value_or(kUnboundedLength));
  if (!restricted.expressible) return std::nullopt;
  if (!restricted.expr) fail("no whole match of the pattern has a length within minLength/maxLength");
  return json_escaped(*restricted.expr);
}

Expr schema_pattern_found_expr(std::string_view pattern, bool json_string_escaping) {
  bool exact = false;
  return parse_regex(found_regex(pattern, exact), {.json_string_escaping = json_string_escaping});
}

Expr schema_pattern_expr(std::string_view pattern, bool json_string_escaping) {
  find_anchors(pattern);
  return parse_regex(pattern, {.json_string_escaping = json_string_escaping});
}

SchemaPatternSearch::SchemaPatternSearch(std::string_view pattern) {
  bool exact = false;
  std::string whole = found_regex(pattern, exact);
  whole_matches_only_ = !exact;
  Grammar grammar;
  grammar.rules.push_back({"root", parse_regex(whole)});
  dfa_ = build_pushdown_automaton(grammar);
}

bool SchemaPatternSearch::found_in(std::string_view text) const {
  uint32_t node = dfa_.rule_start[dfa_.root_rule];
  for (char c : text) {
    node = dfa_.next(node, static_cast<uint8_t>(c));
    if (node == kNoNode) return false;
  }
  return dfa_.nodes[node].accepting;
}

bool pattern_matches_may_contain(std::string_view pattern, std::string_view other) {
  SchemaPatternSearch search(other);
  if (!search.exact()) return true;
  Grammar grammar;
  grammar.rules.push_back({"root", schema_pattern_found_expr(pattern, false)});
  const PushdownAutomaton whole = build_pushdown_automaton(grammar);
  const PushdownAutomaton& found = search.dfa();
  // Breadth-first over pairs of states of the two automata, which read the same bytes.
  constexpr size_t kMaxPairs = 200'000;
  std::set<std::pair<uint32_t, uint32_t>> seen;
  std::vector<std::pair<uint32_t, uint32_t>> work{{whole.rule_start[whole.root_rule], found.rule_start[found.root_rule]}};
  seen.insert(work.front());
  while (!work.empty()) {
    auto [a, b] = work.back();
    work.pop_back();
    if (whole.nodes[a].accepting && found.nodes[b].accepting) return true;
    for (int byte = 0; byte < 256; ++byte) {
      uint32_t next_a = whole.next(a, static_cast<uint8_t>(byte));
      if (next_a == kNoNode) continue;
      uint32_t next_b = found.next(b, static_cast<uint8_t>(byte));
      if (next_b == kNoNode || !seen.insert({next_a, next_b}).second) continue;
      if (seen.size() > kMaxPairs) return true;
      work.push_back({next_a, next_b});
    }
  }
  return false;
}

}  // namespace tern::grammar
