#include "tokenizer/byte_level.h"

#include "tokenizer/utf8.h"

namespace tern::byte_level {

namespace {

struct Tables {
  std::array<std::string, 256> byte_to_char;
  std::array<int, 0x200> char_to_byte;  // every alphabet code point is below U+0200; -1 when not in the alphabet
};

const Tables& tables() {
  static const Tables instance = [] {
    Tables t;
    t.char_to_byte.fill(-1);
    char32_t next_extra = 0x100;
    for (int byte = 0; byte < 256; ++byte) {
      const bool printable = (byte >= '!' && byte <= '~') || (byte >= 0xA1 && byte <= 0xAC) || (byte >= 0xAE);
      const char32_t cp = printable ? static_cast<char32_t>(byte) : next_extra++;
      utf8::append_codepoint(t.byte_to_char[byte], cp);
      t.char_to_byte[cp] = byte;
    }
    return t;
  }();
  return instance;
}

}  // namespace

const std::array<std::string, 256>& byte_to_char() { return tables().byte_to_char; }

void encode(std::string_view bytes, std::string& out) {
  const auto& map = tables().byte_to_char;
  for (char c : bytes) out += map[static_cast<unsigned char>(c)];
}

std::optional<std::string> decode(std::string_view chars) {
  const auto& map = tables().char_to_byte;
  std::string out;
  out.reserve(chars.size());
  std::size_t pos = 0;
  while (pos < chars.size()) {
    if (utf8::valid_sequence_len(chars, pos) == 0) return std::nullopt;
    const char32_t cp = utf8::next_codepoint(chars, pos);
    if (cp >= map.size() || map[cp] < 0) return std::nullopt;
    out.push_back(static_cast<char>(map[cp]));
  }
  return out;
}

}  // namespace tern::byte_level
