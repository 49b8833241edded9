#include "grammar/ebnf_parser.h"

#include <fmt/format.h>

#include <optional>
#include <unordered_map>

#include "grammar/parse_cursor.h"
#include "grammar/regex_parser.h"

namespace tern::grammar {
namespace {

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
}

class EbnfParser {
 public:
  explicit EbnfParser(std::string_view text) : cursor_(text, "invalid grammar") {}

  Grammar parse(std::string_view root_rule) {
    skip_space();
    while (!cursor_.at_end()) {
      size_t name_pos = cursor_.pos();
      std::string name = rule_name();
      if (name.empty()) cursor_.error("expected a rule name");
      skip_space();
      if (!cursor_.consume("::=") && !cursor_.consume(":")) cursor_.error(fmt::format("expected '::=' after rule name '{}'", name));
      uint32_t id = rule_id(name);
      if (defined_[id]) cursor_.error_at(name_pos, fmt::format("rule '{}' is defined twice", name));
      defined_[id] = true;
      grammar_.rules[id].body = alternation();
      skip_space();
      if (cursor_.consume(";")) skip_space();
    }
    // Report the first undefined reference in the text.
    std::optional<std::pair<size_t, uint32_t>> undefined;
    for (const auto& [id, pos] : first_reference_) {
      if (!defined_[id] && (!undefined || pos < undefined->first)) undefined = {pos, id};
    }
    if (undefined) {
      cursor_.error_at(undefined->first, fmt::format("rule '{}' is used but never defined", grammar_.rules[undefined->second].name));
    }
    auto root = ids_.find(std::string(root_rule));
    if (root == ids_.end() || !defined_[root->second]) cursor_.error_at(0, fmt::format("expected a '{}' rule (the start rule)", root_rule));
    grammar_.root = root->second;
    return std::move(grammar_);
  }

 private:
  void skip_space() {
    for (;;) {
      char c = cursor_.peek();
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        cursor_.next();
      } else if (c == '#' || (c == '/' && cursor_.peek(1) == '/')) {
        while (!cursor_.at_end() && cursor_.peek() != '\n') cursor_.next();
      } else {
        return;
      }
    }
  }

  std::string rule_name() {
    std::string name;
    while (is_name_char(cursor_.peek())) name += cursor_.next();
    return name;
  }

  uint32_t rule_id(const std::string& name) {
    auto [it, inserted] = ids_.emplace(name, static_cast<uint32_t>(grammar_.rules.size()));
    if (inserted) {
      grammar_.rules.push_back({name, Expr::empty()});
      defined_.push_back(false);
    }
    return it->second;
  }

  // True when the cursor is at "name ::=" or "name :", i.e. the start of the next rule.
  bool at_rule_start() {
    size_t start = cursor_.pos();
    bool result = !rule_name().empty();
    if (result) {
      skip_space();
      result = cursor_.consume("::=") || (cursor_.peek() == ':' && cursor_.peek(1) != ':');
    }
    cursor_.set_pos(start);
    return result;
  }

  Expr alternation() {
    std::vector<Expr> alternatives{sequence()};
    while (cursor_.peek() == '|') {
      cursor_.next();
      alternatives.push_back(sequence());
    }
    return Expr::choice(std::move(alternatives));
  }

  Expr sequence() {
    std::vector<Expr> items;
    for (;;) {
      skip_space();
      char c = cursor_.peek();
      if (cursor_.at_end() || c == '|' || c == ')' || c == ';' || at_rule_start()) break;
      items.push_back(quantified());
    }
    return Expr::sequence(std::move(items));
  }

  Expr quantified() {
    Expr expr = primary();
    for (;;) {
      char c = cursor_.peek();
      if (c == '*') {
        cursor_.next();
        expr = Expr::repeat(std::move(expr), 0, kUnboundedRepeat);
      } else if (c == '+') {
        cursor_.next();
        expr = Expr::repeat(std::move(expr), 1, kUnboundedRepeat);
      } else if (c == '?') {
        cursor_.next();
        expr = Expr::repeat(std::move(expr), 0, 1);
      } else if (c == '{') {
        size_t start = cursor_.pos();
        cursor_.next();
        skip_space();
        uint32_t min_count = cursor_.decimal();
        uint32_t max_count = min_count;
        skip_space();
        if (cursor_.consume(",")) {
          skip_space();
          max_count = cursor_.peek() == '}' ? kUnboundedRepeat : cursor_.decimal();
          skip_space();
        }
        if (!cursor_.consume("}")) cursor_.error("expected '}' closing the repetition");
        if (max_count < min_count) cursor_.error_at(start, "repetition {m,n} with n < m");
        expr = Expr::repeat(std::move(expr), min_count, max_count);
      } else {
        return expr;
      }
    }
  }

  uint32_t escape() {
    size_t start = cursor_.pos();
    cursor_.next();
    char c = cursor_.next();
    switch (c) {
      case 'n': return '\n';
      case 'r': return '\r';
      case 't': return '\t';
      case '0': return 0;
      case '\\': case '"': case '\'': case ']': case '[': case '-': case '^': case '/': return static_cast<uint8_t>(c);
      case 'x': return cursor_.hex_digits(2);
      case 'u': return cursor_.hex_digits(4);
      case 'U': {
        uint32_t cp = cursor_.hex_digits(8);
        if (cp > kMaxCodepoint) cursor_.error_at(start, "code point out of range");
        return cp;
      }
      default: cursor_.error_at(start, fmt::format("unknown escape '\\{}'", c));
    }
  }

  uint32_t class_or_string_char() {
    if (cursor_.peek() == '\\') return escape();
    return cursor_.next_codepoint();
  }

  Expr primary() {
    size_t start = cursor_.pos();
    char c = cursor_.peek();
    if (c == '"' || c == '\'') {
      char quote = cursor_.next();
      std::string bytes;
      while (cursor_.peek() != quote) {
        if (cursor_.at_end()) cursor_.error_at(start, fmt::format("unterminated string: expected {}", quote));
        uint32_t cp = class_or_string_char();
        if (cp >= 0xD800 && cp <= 0xDFFF) cursor_.error("surrogate code points cannot appear in UTF-8");
        append_utf8(bytes, cp);
      }
      cursor_.next();
      return Expr::literal_bytes(std::move(bytes));
    }
    if (c == '[') {
      cursor_.next();
      bool negated = cursor_.consume("^");
      std::vector<CodepointRange> ranges;
      while (cursor_.peek() != ']') {
        if (cursor_.at_end()) cursor_.error_at(start, "unterminated character class: expected ']'");
        uint32_t lo = class_or_string_char(), hi = lo;
        if (cursor_.peek() == '-' && cursor_.peek(1) != ']') {
          size_t dash = cursor_.pos();
          cursor_.next();
          if (cursor_.at_end()) cursor_.error_at(start, "unterminated character class: expected ']'");
          hi = class_or_string_char();
          if (hi < lo) cursor_.error_at(dash, "character range out of order");
        }
        ranges.push_back({lo, hi});
      }
      cursor_.next();
      return Expr::char_class(std::move(ranges), negated);
    }
    if (c == '.') {
      cursor_.next();
      return Expr::char_class({}, true);
    }
    if (c == '(') {
      ParseCursor::NestedLevel level(cursor_);
      cursor_.next();
      Expr inner = alternation();
      skip_space();
      if (!cursor_.consume(")")) cursor_.error_at(start, "unclosed '(': expected ')'");
      return inner;
    }
    if (c == '/') {
      cursor_.next();
      std::string pattern;
      while (cursor_.peek() != '/') {
        if (cursor_.at_end() || cursor_.peek() == '\n') cursor_.error_at(start, "unterminated /regex/: expected '/'");
        if (cursor_.peek() == '\\' && cursor_.peek(1) == '/') cursor_.next();
        else if (cursor_.peek() == '\\') pattern += cursor_.next();
        pattern += cursor_.next();
      }
      cursor_.next();
      try {
        return parse_regex(pattern);
      } catch (const Error& e) {
        cursor_.error_at(start, e.what());
      }
    }
    if (is_name_char(c)) {
      std::string name = rule_name();
      uint32_t id = rule_id(name);
      first_reference_.emplace(id, start);
      return Expr::rule_ref(id);
    }
    cursor_.error("expected a string, a character class, '.', '(', a /regex/ or a rule name");
  }

  ParseCursor cursor_;
  Grammar grammar_;
  std::unordered_map<std::string, uint32_t> ids_;
  std::vector<bool> defined_;
  std::unordered_map<uint32_t, size_t> first_reference_;
};

}  // namespace

Grammar parse_ebnf(std::string_view text, std::string_view root_rule) { return EbnfParser(text).parse(root_rule); }

}  // namespace tern::grammar
