#include "grammar/grammar_expr.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"
#include "core/nesting_limit.h"

namespace tern::grammar {

namespace {

// The depth of a node over `children`, refused past the limit before the node exists.
uint32_t parent_depth(const std::vector<Expr>& children) {
  uint32_t deepest = 0;
  for (const Expr& child : children) deepest = std::max(deepest, child.depth);
  if (deepest >= static_cast<uint32_t>(kMaxNestingDepth)) fail("expression {}", nesting_limit_message());
  return deepest + 1;
}

}  // namespace

Expr Expr::literal_bytes(std::string bytes) {
  Expr e;
  e.kind = bytes.empty() ? ExprKind::kEmpty : ExprKind::kLiteral;
  e.literal = std::move(bytes);
  return e;
}

Expr Expr::char_class(std::vector<CodepointRange> ranges, bool negated) {
  Expr e;
  e.kind = ExprKind::kCharClass;
  e.ranges = normalize_ranges(std::move(ranges), negated);
  return e;
}

Expr Expr::rule_ref(uint32_t rule) {
  Expr e;
  e.kind = ExprKind::kRuleRef;
  e.rule = rule;
  return e;
}

Expr Expr::sequence(std::vector<Expr> items) {
  std::erase_if(items, [](const Expr& item) { return item.kind == ExprKind::kEmpty; });
  if (items.empty()) return empty();
  if (items.size() == 1) return std::move(items[0]);
  Expr e;
  e.kind = ExprKind::kSequence;
  e.depth = parent_depth(items);
  e.children = std::move(items);
  return e;
}

Expr Expr::choice(std::vector<Expr> alternatives) {
  if (alternatives.size() == 1) return std::move(alternatives[0]);
  Expr e;
  e.kind = ExprKind::kChoice;
  e.depth = parent_depth(alternatives);
  e.children = std::move(alternatives);
  return e;
}

Expr Expr::repeat(Expr body, uint32_t min_count, uint32_t max_count) {
  if (max_count == 0 || body.kind == ExprKind::kEmpty) return empty();
  if (min_count == 1 && max_count == 1) return body;
  Expr e;
  e.kind = ExprKind::kRepeat;
  e.children.push_back(std::move(body));
  e.depth = parent_depth(e.children);
  e.min_repeat = min_count;
  e.max_repeat = max_count;
  return e;
}

std::vector<CodepointRange> normalize_ranges(std::vector<CodepointRange> ranges, bool negated) {
  std::sort(ranges.begin(), ranges.end(), [](auto& a, auto& b) { return a.lo < b.lo; });
  std::vector<CodepointRange> merged;
  for (const auto& r : ranges) {
    if (r.lo > r.hi) continue;
    if (!merged.empty() && r.lo <= merged.back().hi + 1) {
      merged.back().hi = std::max(merged.back().hi, r.hi);
    } else {
      merged.push_back(r);
    }
  }
  if (negated) {
    std::vector<CodepointRange> complement;
    uint32_t next = 0;
    for (const auto& r : merged) {
      if (r.lo > next) complement.push_back({next, r.lo - 1});
      next = r.hi + 1;
    }
    if (next <= kMaxCodepoint) complement.push_back({next, kMaxCodepoint});
    merged = std::move(complement);
  }
  // Cut out the surrogates D800-DFFF.
  std::vector<CodepointRange> out;
  for (auto r : merged) {
    r.hi = std::min(r.hi, kMaxCodepoint);
    if (r.lo > r.hi) continue;
    if (r.hi < 0xD800 || r.lo > 0xDFFF) {
      out.push_back(r);
      continue;
    }
    if (r.lo < 0xD800) out.push_back({r.lo, 0xD7FF});
    if (r.hi > 0xDFFF) out.push_back({0xE000, r.hi});
  }
  return out;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

namespace {

// Escapes one code point for use inside "..." or [...]; everything outside printable ASCII becomes \u/\U.
std::string escape_codepoint(uint32_t cp, bool in_class) {
  switch (cp) {
    case '\n': return "\\n";
    case '\r': return "\\r";
    case '\t': return "\\t";
    case '\\': return "\\\\";
    case '"': return in_class ? "\"" : "\\\"";
    case ']': return in_class ? "\\]" : "]";
    case '-': return in_class ? "\\-" : "-";
    case '^': return in_class ? "\\^" : "^";
    default: break;
  }
  if (cp >= 0x20 && cp < 0x7F) return std::string(1, static_cast<char>(cp));
  if (cp <= 0xFFFF) return fmt::format("\\u{:04X}", cp);
  return fmt::format("\\U{:08X}", cp);
}

std::string literal_to_ebnf(const std::string& bytes) {
  // Literals are valid UTF-8 when they come from the front ends; decode to print escapes per code point.
  std::string out = "\"";
  for (size_t i = 0; i < bytes.size();) {
    auto b = static_cast<unsigned char>(bytes[i]);
    uint32_t cp = b;
    size_t len = 1;
    if (b >= 0xF0) { cp = b & 0x07; len = 4; }
    else if (b >= 0xE0) { cp = b & 0x0F; len = 3; }
    else if (b >= 0xC0) { cp = b & 0x1F; len = 2; }
    for (size_t k = 1; k < len && i + k < bytes.size(); ++k) cp = (cp << 6) | (bytes[i + k] & 0x3F);
    out += escape_codepoint(cp, false);
    i += len;
  }
  return out + "\"";
}

}  // namespace

std::string to_ebnf(const Expr& expr, const Grammar* grammar) {
  switch (expr.kind) {
    case ExprKind::kEmpty: return "\"\"";
    case ExprKind::kLiteral: return literal_to_ebnf(expr.literal);
    case ExprKind::kCharClass: {
      std::string out = "[";
      for (const auto& r : expr.ranges) {
        out += escape_codepoint(r.lo, true);
        if (r.hi != r.lo) out += "-" + escape_codepoint(r.hi, true);
      }
      if (expr.ranges.empty()) return "[^\\u0000-\\U0010FFFF]";
      return out + "]";
    }
    case ExprKind::kRuleRef:
      return grammar ? grammar->rules.at(expr.rule).name : fmt::format("rule{}", expr.rule);
    case ExprKind::kSequence: {
      std::string out = "(";
      for (size_t i = 0; i < expr.children.size(); ++i) {
        if (i) out += " ";
        out += to_ebnf(expr.children[i], grammar);
      }
      return out + ")";
    }
    case ExprKind::kChoice: {
      std::string out = "(";
      for (size_t i = 0; i < expr.children.size(); ++i) {
        if (i) out += " | ";
        out += to_ebnf(expr.children[i], grammar);
      }
      return out + ")";
    }
    case ExprKind::kRepeat: {
      std::string body = to_ebnf(expr.children[0], grammar);
      if (expr.max_repeat == kUnboundedRepeat) {
        if (expr.min_repeat == 0) return body + "*";
        if (expr.min_repeat == 1) return body + "+";
        return fmt::format("{}{{{},}}", body, expr.min_repeat);
      }
      if (expr.min_repeat == 0 && expr.max_repeat == 1) return body + "?";
      return fmt::format("{}{{{},{}}}", body, expr.min_repeat, expr.max_repeat);
    }
  }
  return "";
}

std::string to_ebnf(const Grammar& grammar) {
  std::string out;
  for (const auto& rule : grammar.rules) out += rule.name + " ::= " + to_ebnf(rule.body, &grammar) + "\n";
  return out;
}

}  // namespace tern::grammar
