#include "chat/template_lexer.h"

#include <unicode/uchar.h>

#include <algorithm>
#include <cctype>

#include "chat/python_string.h"
#include "core/error.h"

namespace tern::chat {
namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

// Jinja normalizes every newline sequence of the source to "\n".
std::string normalize_newlines(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out += source[i];
    }
  }
  return out;
}

class Lexer {
 public:
  Lexer(std::string source, const TemplateOptions& options) : source_(std::move(source)), options_(options) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < source_.size(); ++i) {
      if (source_[i] == '\n') line_starts_.push_back(i + 1);
    }
  }

  std::vector<Token> run() {
    while (pos_ < source_.size()) {
      size_t tag = find_tag_start(pos_);
      if (tag == std::string::npos) {
        push(TokenKind::kText, source_.substr(pos_), pos_);
        pos_ = source_.size();
        break;
      }
      char kind = source_[tag + 1];
      char sign = tag + 2 < source_.size() ? source_[tag + 2] : '\0';
      std::string text = source_.substr(pos_, tag - pos_);
      if (sign == '-') {
        size_t end = text.size();
        while (end > 0 && is_space(text[end - 1])) --end;
        text.resize(end);
      } else if (sign != '+' && options_.lstrip_blocks && kind != '{') {
        size_t line_begin = text.rfind('\n');
        line_begin = line_begin == std::string::npos ? 0 : line_begin + 1;
        bool only_blanks = line_begin < text.size() &&
                           std::all_of(text.begin() + static_cast<long>(line_begin), text.end(), is_space);
        if ((line_begin > 0 || line_starting_) && only_blanks) text.resize(line_begin);
      }
      if (!text.empty()) push(TokenKind::kText, std::move(text), pos_);
      size_t inner = tag + 2 + (sign == '-' || sign == '+' ? 1 : 0);
      if (kind == '#') {
        lex_comment(tag, inner);
      } else {
        lex_tag(tag, inner, kind == '{');
      }
      line_starting_ = pos_ > 0 && source_[pos_ - 1] == '\n';
    }
    push(TokenKind::kEnd, "", source_.size());
    return std::move(tokens_);
  }

 private:
  size_t find_tag_start(size_t from) const {
    for (size_t i = source_.find('{', from); i != std::string::npos; i = source_.find('{', i + 1)) {
      if (i + 1 < source_.size() && (source_[i + 1] == '{' || source_[i + 1] == '%' || source_[i + 1] == '#')) {
        return i;
      }
    }
    return std::string::npos;
  }

  SourcePos position(size_t offset) const {
    auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
    auto line = static_cast<int>(it - line_starts_.begin());
    return {line, static_cast<int>(offset - line_starts_[static_cast<size_t>(line - 1)]) + 1};
  }

  [[noreturn]] void error_at(size_t offset, const std::string& message) const {
    SourcePos p = position(offset);
    fail("chat template syntax error at line {}, column {}: {}", p.line, p.column, message);
  }

  void push(TokenKind kind, std::string text, size_t offset) {
    tokens_.push_back(Token{kind, std::move(text), position(offset)});
  }

  // After a tag's closing delimiter: `-` strips all following whitespace, trim_blocks drops one newline.
  void consume_after_tag(char end_sign, bool is_block) {
    if (end_sign == '-') {
      while (pos_ < source_.size() && is_space(source_[pos_])) ++pos_;
    } else if (end_sign != '+' && is_block && options_.trim_blocks && pos_ < source_.size() &&
               source_[pos_] == '\n') {
      ++pos_;
    }
  }

  void lex_comment(size_t tag, size_t inner) {
    size_t close = source_.find("#}", inner);
    if (close == std::string::npos) error_at(tag, "unclosed comment (missing '#}')");
    char end_sign = close > inner ? source_[close - 1] : '\0';
    pos_ = close + 2;
    consume_after_tag(end_sign, true);
  }

  // Checks for the closing delimiter of the current tag at pos_; returns its length (0 if none) and its sign.
  size_t match_tag_end(bool is_variable, char& sign) const {
    std::string_view rest = std::string_view(source_).substr(pos_);
    std::string_view close = is_variable ? "}}" : "%}";
    if (rest.substr(0, 2) == close) {
      sign = '\0';
      return 2;
    }
    if (rest.size() >= 3 && (rest[0] == '-' || (rest[0] == '+' && !is_variable)) && rest.substr(1, 2) == close) {
      sign = rest[0];
      return 3;
    }
    return 0;
  }

  void lex_tag(size_t tag, size_t inner, bool is_variable) {
    push(is_variable ? TokenKind::kVariableBegin : TokenKind::kBlockBegin, "", tag);
    pos_ = inner;
    if (!is_variable && try_lex_raw(tag)) return;
    int depth = 0;
    while (true) {
      while (pos_ < source_.size() && is_space(source_[pos_])) ++pos_;
      if (pos_ >= source_.size()) error_at(tag, is_variable ? "unclosed '{{' (missing '}}')" : "unclosed '{%' (missing '%}')");
      char sign = '\0';
      if (depth == 0) {
        if (size_t len = match_tag_end(is_variable, sign)) {
          push(is_variable ? TokenKind::kVariableEnd : TokenKind::kBlockEnd, "", pos_);
          pos_ += len;
          consume_after_tag(sign, !is_variable);
          return;
        }
      }
      lex_expression_token(depth);
    }
  }

  // `{% raw %}...{% endraw %}` is text, taken verbatim.
  bool try_lex_raw(size_t tag) {
    size_t p = pos_;
    while (p < source_.size() && is_space(source_[p])) ++p;
    if (source_.compare(p, 3, "raw") != 0) return false;
    p += 3;
    while (p < source_.size() && is_space(source_[p])) ++p;
    char sign = '\0';
    if (p < source_.size() && (source_[p] == '-' || source_[p] == '+')) sign = source_[p++];
    if (source_.compare(p, 2, "%}") != 0) return false;
    tokens_.pop_back();  // the block-begin token: raw blocks produce only text
    pos_ = p + 2;
    consume_after_tag(sign, true);
    size_t body_begin = pos_;
    for (size_t search = body_begin;; ++search) {
      size_t open = source_.find("{%", search);
      if (open == std::string::npos) error_at(tag, "unclosed raw block (missing '{% endraw %}')");
      size_t q = open + 2;
      char open_sign = '\0';
      if (q < source_.size() && (source_[q] == '-' || source_[q] == '+')) open_sign = source_[q++];
      while (q < source_.size() && is_space(source_[q])) ++q;
      if (source_.compare(q, 6, "endraw") != 0) continue;
      q += 6;
      while (q < source_.size() && is_space(source_[q])) ++q;
      char end_sign = '\0';
      if (q < source_.size() && (source_[q] == '-' || source_[q] == '+')) end_sign = source_[q++];
      if (source_.compare(q, 2, "%}") != 0) continue;
      std::string body = source_.substr(body_begin, open - body_begin);
      if (open_sign == '-') {
        while (!body.empty() && is_space(body.back())) body.pop_back();
      }
      if (!body.empty()) push(TokenKind::kText, std::move(body), body_begin);
      pos_ = q + 2;
      consume_after_tag(end_sign, true);
      return true;
    }
  }

  void lex_expression_token(int& depth) {
    size_t start = pos_;
    char c = source_[pos_];
    if (c == '\'' || c == '"') {
      push(TokenKind::kString, lex_string(), start);
      return;
    }
    if (std::isdigit(static_cast<unsigned char>(c))) {
      lex_number(start);
      return;
    }
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      while (pos_ < source_.size() && (std::isalnum(static_cast<unsigned char>(source_[pos_])) || source_[pos_] == '_')) {
        ++pos_;
      }
      push(TokenKind::kName, source_.substr(start, pos_ - start), start);
      return;
    }
    static constexpr std::string_view kTwoCharOperators[] = {"**", "//", "==", "!=", "<=", ">="};
    for (std::string_view op : kTwoCharOperators) {
      if (source_.compare(pos_, 2, op) == 0) {
        pos_ += 2;
        push(TokenKind::kOperator, std::string(op), start);
        return;
      }
    }
    static constexpr std::string_view kOneCharOperators = "+-*/%~()[]{},.:|=<>";
    if (kOneCharOperators.find(c) == std::string_view::npos) {
      error_at(start, std::string("unexpected character '") + c + "'");
    }
    if (c == '(' || c == '[' || c == '{') ++depth;
    if (c == ')' || c == ']' || c == '}') {
      if (depth == 0) error_at(start, std::string("unbalanced '") + c + "'");
      --depth;
    }
    ++pos_;
    push(TokenKind::kOperator, std::string(1, c), start);
  }

  void lex_number(size_t start) {
    auto digits = [&] {
      while (pos_ < source_.size() && (std::isdigit(static_cast<unsigned char>(source_[pos_])) || source_[pos_] == '_')) {
        ++pos_;
      }
    };
    digits();
    bool is_float = false;
    if (pos_ + 1 < source_.size() && source_[pos_] == '.' && std::isdigit(static_cast<unsigned char>(source_[pos_ + 1]))) {
      is_float = true;
      ++pos_;
      digits();
    }
    if (pos_ < source_.size() && (source_[pos_] == 'e' || source_[pos_] == 'E')) {
      size_t p = pos_ + 1;
      if (p < source_.size() && (source_[p] == '+' || source_[p] == '-')) ++p;
      if (p < source_.size() && std::isdigit(static_cast<unsigned char>(source_[p]))) {
        is_float = true;
        pos_ = p;
        digits();
      }
    }
    std::string text;
    for (size_t i = start; i < pos_; ++i) {
      if (source_[i] != '_') text += source_[i];
    }
    push(is_float ? TokenKind::kFloat : TokenKind::kInteger, std::move(text), start);
  }

  // The character of a `\N{NAME}` escape (the backslash and N already read): a Unicode name or alias, in any case.
  std::string character_named(size_t literal_start) {
    size_t escape_start = pos_ - 2;
    if (pos_ >= source_.size() || source_[pos_] != '{') error_at(escape_start, "malformed \\N character escape");
    size_t close = source_.find('}', pos_);
    if (close == std::string::npos) error_at(literal_start, "malformed \\N character escape");
    std::string name = source_.substr(pos_ + 1, close - pos_ - 1);
    pos_ = close + 1;
    for (UCharNameChoice choice : {U_UNICODE_CHAR_NAME, U_CHAR_NAME_ALIAS}) {
      UErrorCode status = U_ZERO_ERROR;
      UChar32 c = u_charFromName(choice, name.c_str(), &status);
      if (U_SUCCESS(status)) return encode_utf8(std::u32string(1, static_cast<char32_t>(c)));
    }
    error_at(escape_start, "unknown Unicode character name '" + name + "'");
  }

  // Decodes a string literal with Python's escapes (Jinja decodes them with "unicode-escape").
  std::string lex_string() {
    size_t start = pos_;
    char quote = source_[pos_++];
    std::string out;
    while (true) {
      if (pos_ >= source_.size()) error_at(start, "unterminated string literal");
      char c = source_[pos_++];
      if (c == quote) return out;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= source_.size()) error_at(start, "unterminated string literal");
      char e = source_[pos_++];
      switch (e) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case '\\': out += '\\'; break;
        case '\'': out += '\''; break;
        case '"': out += '"'; break;
        case 'a': out += '\a'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'v': out += '\v'; break;
        case '\n': break;  // a backslash-newline continues the line
        case 'N': out += character_named(start); break;
        case 'x':
        case 'u':
        case 'U': {
          size_t len = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          if (pos_ + len > source_.size()) error_at(pos_ - 2, std::string("truncated \\") + e + " escape");
          std::string hex = source_.substr(pos_, len);
          if (!std::all_of(hex.begin(), hex.end(), [](char h) { return std::isxdigit(static_cast<unsigned char>(h)); })) {
            error_at(pos_ - 2, std::string("invalid \\") + e + " escape");
          }
          pos_ += len;
          out += encode_utf8(std::u32string(1, static_cast<char32_t>(std::stoul(hex, nullptr, 16))));
          break;
        }
        default:
          if (e >= '0' && e <= '7') {
            unsigned value = static_cast<unsigned>(e - '0');
            for (int i = 0; i < 2 && pos_ < source_.size() && source_[pos_] >= '0' && source_[pos_] <= '7'; ++i) {
              value = value * 8 + static_cast<unsigned>(source_[pos_++] - '0');
            }
            out += encode_utf8(std::u32string(1, static_cast<char32_t>(value)));
          } else {
            out += '\\';  // Python keeps unknown escapes as written
            out += e;
          }
      }
    }
  }

  std::string source_;
  TemplateOptions options_;
  std::vector<size_t> line_starts_;
  std::vector<Token> tokens_;
  size_t pos_ = 0;
  bool line_starting_ = true;
};

}  // namespace

std::vector<Token> tokenize_template(std::string_view source, const TemplateOptions& options) {
  std::string normalized = normalize_newlines(source);
  if (!normalized.empty() && normalized.back() == '\n') normalized.pop_back();  // keep_trailing_newline=False
  return Lexer(std::move(normalized), options).run();
}

std::string describe_token(const Token& token) {
  switch (token.kind) {
    case TokenKind::kText: return "text";
    case TokenKind::kVariableBegin: return "'{{'";
    case TokenKind::kVariableEnd: return "'}}'";
    case TokenKind::kBlockBegin: return "'{%'";
    case TokenKind::kBlockEnd: return "'%}'";
    case TokenKind::kString: return "string literal";
    case TokenKind::kEnd: return "end of template";
    default: return "'" + token.text + "'";
  }
}

}  // namespace tern::chat
