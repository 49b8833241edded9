#pragma once
// A read position in grammar source text that reports errors as "<what> at line L, column C: expected X".
#include <cstdint>
#include <string>
#include <string_view>

#include "core/error.h"

namespace tern::grammar {

class ParseCursor {
 public:
  ParseCursor(std::string_view text, std::string what) : text_(text), what_(std::move(what)) {}

  bool at_end() const { return pos_ >= text_.size(); }
  char peek(size_t ahead = 0) const { return pos_ + ahead < text_.size() ? text_[pos_ + ahead] : '\0'; }
  char next() { return text_[pos_++]; }
  size_t pos() const { return pos_; }
  void set_pos(size_t pos) { pos_ = pos; }
  std::string_view rest() const { return text_.substr(pos_); }
  bool consume(std::string_view token) {
    if (rest().substr(0, token.size()) != token) return false;
    pos_ += token.size();
    return true;
  }

  // Decodes one UTF-8 code point (invalid bytes are an error at their position).
  uint32_t next_codepoint();
  // Reads a fixed number of hex digits.
  uint32_t hex_digits(int count);
  // Reads a decimal number (for {m,n}).
  uint32_t decimal();

  [[noreturn]] void error_at(size_t pos, std::string_view message) const;
  [[noreturn]] void error(std::string_view message) const { error_at(pos_, message); }

  // One level of a recursive-descent parser over this text (a group it entered), for as long as it lives. A level
  // past kMaxNestingDepth (core/nesting_limit.h) is an error at the cursor: the parser's recursion stays shallow.
  class NestedLevel {
   public:
    explicit NestedLevel(ParseCursor& cursor);
    ~NestedLevel() { --cursor_.depth_; }
    NestedLevel(const NestedLevel&) = delete;
    NestedLevel& operator=(const NestedLevel&) = delete;

   private:
    ParseCursor& cursor_;
  };

 private:
  std::string_view text_;
  std::string what_;
  size_t pos_ = 0;
  int depth_ = 0;  // NestedLevels alive
};

}  // namespace tern::grammar
