#include "grammar/regex_parser.h"

#include <fmt/format.h>

#include "grammar/parse_cursor.h"

namespace tern::grammar {

std::vector<CodepointRange> regex_whitespace_ranges() {
  return {{0x09, 0x0D}, {0x20, 0x20},     {0xA0, 0xA0},     {0x1680, 0x1680}, {0x2000, 0x200A},
          {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};
}

namespace {

bool contains(const std::vector<CodepointRange>& ranges, uint32_t cp) {
  for (const auto& r : ranges) {
    if (cp >= r.lo && cp <= r.hi) return true;
  }
  return false;
}

std::string json_escape_of(uint32_t cp) {
  switch (cp) {
    case '"': return "\\\"";
    case '\\': return "\\\\";
    case '\n': return "\\n";
    case '\r': return "\\r";
    case '\t': return "\\t";
    case '\b': return "\\b";
    case '\f': return "\\f";
    default: return fmt::format("\\u{:04x}", cp);
  }
}

}  // namespace

Expr json_escaped_char_set(const std::vector<CodepointRange>& ranges) {
  // Code points that JSON forbids raw inside a string: controls, '"' and '\'.
  // The raw part: ranges intersected with the complement of the specials.
  std::vector<CodepointRange> specials_complement = normalize_ranges({{0x00, 0x1F}, {'"', '"'}, {'\\', '\\'}}, true);
  std::vector<CodepointRange> kept;
  for (const auto& a : normalize_ranges(ranges, false)) {
    for (const auto& b : specials_complement) {
      uint32_t lo = std::max(a.lo, b.lo), hi = std::min(a.hi, b.hi);
      if (lo <= hi) kept.push_back({lo, hi});
    }
  }
  std::vector<Expr> alternatives;
  if (!kept.empty()) alternatives.push_back(Expr::char_class(kept, false));
  std::vector<uint32_t> specials;
  for (uint32_t cp = 0; cp < 0x20; ++cp) specials.push_back(cp);
  specials.push_back('"');
  specials.push_back('\\');
  for (uint32_t cp : specials) {
    if (contains(ranges, cp)) alternatives.push_back(Expr::literal_bytes(json_escape_of(cp)));
  }
  if (alternatives.empty()) return Expr::char_class({}, false);
  return Expr::choice(std::move(alternatives));
}

namespace {

class RegexParser {
 public:
  RegexParser(std::string_view pattern, const RegexOptions& options)
      : cursor_(pattern, "invalid regular expression"), options_(options) {}

  Expr parse() {
    Expr expr = alternation();
    if (!cursor_.at_end()) cursor_.error(cursor_.peek() == ')' ? "unmatched ')'" : "unexpected character");
    return expr;
  }

 private:
  Expr char_set(std::vector<CodepointRange> ranges, bool negated) {
    auto normalized = normalize_ranges(std::move(ranges), negated);
    if (options_.json_string_escaping) return json_escaped_char_set(normalized);
    return Expr::char_class(std::move(normalized), false);
  }

  Expr single(uint32_t cp) {
    if (options_.json_string_escaping) return json_escaped_char_set({{cp, cp}});
    std::string bytes;
    append_utf8(bytes, cp);
    return Expr::literal_bytes(std::move(bytes));
  }

  Expr alternation() {
    std::vector<Expr> alternatives{sequence()};
    while (cursor_.peek() == '|' && !cursor_.at_end()) {
      cursor_.next();
      alternatives.push_back(sequence());
    }
    return Expr::choice(std::move(alternatives));
  }

  Expr sequence() {
    std::vector<Expr> items;
    while (!cursor_.at_end() && cursor_.peek() != '|' && cursor_.peek() != ')') items.push_back(quantified());
    return Expr::sequence(std::move(items));
  }

  Expr quantified() {
    size_t atom_pos = cursor_.pos();
    Expr expr = atom();
    for (;;) {
      uint32_t min_count = 0, max_count = 0;
      char c = cursor_.peek();
      if (cursor_.at_end()) break;
      if (c == '*') {
        cursor_.next();
        max_count = kUnboundedRepeat;
      } else if (c == '+') {
        cursor_.next();
        min_count = 1;
        max_count = kUnboundedRepeat;
      } else if (c == '?') {
        cursor_.next();
        max_count = 1;
      } else if (c == '{' && braces(min_count, max_count)) {
      } else {
        break;
      }
      if (atom_pos == cursor_.pos()) cursor_.error("nothing to repeat");
      if (cursor_.peek() == '?' || cursor_.peek() == '+') cursor_.next();  // lazy/possessive: same language
      expr = Expr::repeat(std::move(expr), min_count, max_count);
    }
    return expr;
  }

  // {m}, {m,}, {m,n}; anything else is a literal '{' (as in ECMAScript without the u flag).
  bool braces(uint32_t& min_count, uint32_t& max_count) {
    size_t start = cursor_.pos();
    cursor_.next();
    if (!(cursor_.peek() >= '0' && cursor_.peek() <= '9')) {
      cursor_.set_pos(start);
      return false;
    }
    min_count = cursor_.decimal();
    max_count = min_count;
    if (cursor_.peek() == ',') {
      cursor_.next();
      max_count = cursor_.peek() == '}' ? kUnboundedRepeat : cursor_.decimal();
    }
    if (cursor_.peek() != '}') {
      cursor_.set_pos(start);
      return false;
    }
    cursor_.next();
    if (max_count < min_count) cursor_.error_at(start, "repetition {m,n} with n < m");
    return true;
  }

  Expr atom() {
    size_t start = cursor_.pos();
    char c = cursor_.peek();
    switch (c) {
      case '(': {
        ParseCursor::NestedLevel level(cursor_);
        cursor_.next();
        if (cursor_.consume("?")) {
          if (cursor_.consume(":")) {
          } else if (cursor_.consume("P<") || (cursor_.peek() == '<' && cursor_.peek(1) != '=' && cursor_.peek(1) != '!')) {
            if (cursor_.peek() == '<') cursor_.next();
            while (!cursor_.at_end() && cursor_.peek() != '>') cursor_.next();
            if (!cursor_.consume(">")) cursor_.error("expected '>' closing the group name");
          } else {
            cursor_.error_at(start, "lookaround and inline flags are not supported");
          }
        }
        Expr inner = alternation();
        if (!cursor_.consume(")")) cursor_.error_at(start, "unclosed '(': expected ')'");
        return inner;
      }
      case '[': return char_class();
      case '.':
        cursor_.next();
        return char_set({{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}}, true);
      case '^':
      case '$':
        cursor_.next();
        return Expr::empty();
      case '\\': return escape_atom();
      case '*':
      case '+':
      case '?': cursor_.error("nothing to repeat");
      default: return single(cursor_.next_codepoint());
    }
  }

  // Shorthand classes \d \w \s and their negations; returns false if the escape is not one.
  bool shorthand(char c, std::vector<CodepointRange>& ranges, bool& negated) {
    switch (c) {
      case 'd': case 'D': ranges = {{'0', '9'}}; break;
      case 'w': case 'W': ranges = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}}; break;
      case 's': case 'S': ranges = regex_whitespace_ranges(); break;
      default: return false;
    }
    negated = c >= 'A' && c <= 'Z';
    return true;
  }

  // A single-code-point escape after the backslash (already consumed).
  uint32_t escaped_codepoint(size_t start) {
    char c = cursor_.next();
    switch (c) {
      case 'n': return '\n';
      case 'r': return '\r';
      case 't': return '\t';
      case 'f': return '\f';
      case 'v': return '\v';
      case '0': return 0;
      case 'x': return cursor_.hex_digits(2);
      case 'u':
        if (cursor_.consume("{")) {
          uint32_t cp = 0;
          int digits = 0;
          while (cursor_.peek() != '}') {
            cp = cp * 16 + cursor_.hex_digits(1);
            if (++digits > 6 || cp > kMaxCodepoint) cursor_.error_at(start, "code point out of range");
          }
          cursor_.next();
          return cp;
        }
        return cursor_.hex_digits(4);
      case 'b': case 'B': cursor_.error_at(start, "word boundaries (\\b, \\B) are not supported");
      case 'p': case 'P': cursor_.error_at(start, "Unicode property escapes are not supported");
      default:
        if (c >= '1' && c <= '9') cursor_.error_at(start, "backreferences are not supported");
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) cursor_.error_at(start, fmt::format("unknown escape '\\{}'", c));
        cursor_.set_pos(cursor_.pos() - 1);
        return cursor_.next_codepoint();
    }
  }

  Expr escape_atom() {
    size_t start = cursor_.pos();
    cursor_.next();
    if (cursor_.at_end()) cursor_.error_at(start, "pattern ends with a backslash");
    std::vector<CodepointRange> ranges;
    bool negated = false;
    if (shorthand(cursor_.peek(), ranges, negated)) {
      cursor_.next();
      return char_set(std::move(ranges), negated);
    }
    return single(escaped_codepoint(start));
  }

  Expr char_class() {
    size_t start = cursor_.pos();
    cursor_.next();
    bool negated = cursor_.consume("^");
    std::vector<CodepointRange> ranges;
    bool first = true;
    while (first || cursor_.peek() != ']') {
      if (cursor_.at_end()) cursor_.error_at(start, "unclosed '[': expected ']'");
      first = false;
      uint32_t lo;
      if (cursor_.peek() == '\\') {
        size_t escape_pos = cursor_.pos();
        cursor_.next();
        std::vector<CodepointRange> shorthand_ranges;
        bool shorthand_negated = false;
        if (shorthand(cursor_.peek(), shorthand_ranges, shorthand_negated)) {
          cursor_.next();
          for (auto r : normalize_ranges(shorthand_ranges, shorthand_negated)) ranges.push_back(r);
          continue;
        }
        lo = cursor_.peek() == 'b' ? (cursor_.next(), '\b') : escaped_codepoint(escape_pos);
      } else {
        lo = cursor_.next_codepoint();
      }
      uint32_t hi = lo;
      if (cursor_.peek() == '-' && cursor_.peek(1) != ']' && cursor_.peek(1) != '\0') {
        size_t dash = cursor_.pos();
        cursor_.next();
        if (cursor_.peek() == '\\') {
          size_t escape_pos = cursor_.pos();
          cursor_.next();
          hi = escaped_codepoint(escape_pos);
        } else {
          hi = cursor_.next_codepoint();
        }
        if (hi < lo) cursor_.error_at(dash, "character range out of order");
      }
      ranges.push_back({lo, hi});
    }
    cursor_.next();
    return char_set(std::move(ranges), negated);
  }

  ParseCursor cursor_;
  RegexOptions options_;
};

}  // namespace

Expr parse_regex(std::string_view pattern, const RegexOptions& options) { return RegexParser(pattern, options).parse(); }

}  // namespace tern::grammar
