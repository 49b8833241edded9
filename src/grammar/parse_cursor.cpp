#include "grammar/parse_cursor.h"

#include "core/nesting_limit.h"

namespace tern::grammar {

uint32_t ParseCursor::next_codepoint() {
  auto lead = static_cast<unsigned char>(peek());
  size_t len = lead < 0x80 ? 1 : lead >= 0xF0 && lead < 0xF5 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC2 ? 2 : 0;
  if (len == 0 || pos_ + len > text_.size()) error("invalid UTF-8");
  uint32_t cp = len == 1 ? lead : len == 2 ? lead & 0x1F : len == 3 ? lead & 0x0F : lead & 0x07;
  for (size_t k = 1; k < len; ++k) {
    auto cont = static_cast<unsigned char>(text_[pos_ + k]);
    if ((cont & 0xC0) != 0x80) error("invalid UTF-8");
    cp = (cp << 6) | (cont & 0x3F);
  }
  pos_ += len;
  return cp;
}

uint32_t ParseCursor::hex_digits(int count) {
  uint32_t value = 0;
  for (int i = 0; i < count; ++i) {
    char c = peek();
    int digit = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
    if (digit < 0) error(fmt::format("expected {} hex digits", count));
    value = value * 16 + static_cast<uint32_t>(digit);
    ++pos_;
  }
  return value;
}

uint32_t ParseCursor::decimal() {
  if (!(peek() >= '0' && peek() <= '9')) error("expected a number");
  uint64_t value = 0;
  while (peek() >= '0' && peek() <= '9') {
    value = value * 10 + static_cast<uint64_t>(next() - '0');
    if (value > 1'000'000) error("repetition count too large (limit 1000000)");
  }
  return static_cast<uint32_t>(value);
}

void ParseCursor::error_at(size_t pos, std::string_view message) const {
  size_t line = 1, column = 1;
  for (size_t i = 0; i < pos && i < text_.size(); ++i) {
    if (text_[i] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  fail("{} at line {}, column {} (offset {}): {}", what_, line, column, pos, message);
}

ParseCursor::NestedLevel::NestedLevel(ParseCursor& cursor) : cursor_(cursor) {
  if (cursor_.depth_ >= kMaxNestingDepth) cursor_.error(nesting_limit_message());
  ++cursor_.depth_;
}

}  // namespace tern::grammar
