#include "tokenizer/utf8.h"

#include <cstring>

namespace tern::utf8 {

namespace {

bool in_range(unsigned char byte, unsigned char low, unsigned char high) { return byte >= low && byte <= high; }

// Number of bytes, starting at pos, that belong to the longest prefix of a well-formed sequence (the "maximal
// subpart" of Unicode's substitution rule), and whether that prefix is a complete sequence.
struct SequenceScan {
  std::size_t len;
  bool complete;
};

SequenceScan scan_sequence(std::string_view text, std::size_t pos) {
  const auto lead = static_cast<unsigned char>(text[pos]);
  if (lead < 0x80) return {1, true};
  std::size_t needed = 0;
  unsigned char second_low = 0x80, second_high = 0xBF;
  if (in_range(lead, 0xC2, 0xDF)) {
    needed = 1;
  } else if (lead == 0xE0) {
    needed = 2, second_low = 0xA0;
  } else if (in_range(lead, 0xE1, 0xEC) || lead == 0xEE || lead == 0xEF) {
    needed = 2;
  } else if (lead == 0xED) {
    needed = 2, second_high = 0x9F;
  } else if (lead == 0xF0) {
    needed = 3, second_low = 0x90;
  } else if (in_range(lead, 0xF1, 0xF3)) {
    needed = 3;
  } else if (lead == 0xF4) {
    needed = 3, second_high = 0x8F;
  } else {
    return {1, false};
  }
  std::size_t len = 1;
  for (std::size_t i = 1; i <= needed; ++i) {
    if (pos + i >= text.size()) return {len, false};
    const auto byte = static_cast<unsigned char>(text[pos + i]);
    const bool ok = i == 1 ? in_range(byte, second_low, second_high) : in_range(byte, 0x80, 0xBF);
    if (!ok) return {len, false};
    ++len;
  }
  return {len, true};
}

}  // namespace

std::size_t valid_sequence_len(std::string_view text, std::size_t pos) {
  const SequenceScan scan = scan_sequence(text, pos);
  return scan.complete ? scan.len : 0;
}

std::optional<std::size_t> first_invalid_offset(std::string_view text) {
  std::size_t pos = 0;
  while (pos < text.size()) {
    // Most text is ASCII: check eight bytes at a time.
    while (pos + 8 <= text.size()) {
      uint64_t word;
      std::memcpy(&word, text.data() + pos, 8);
      if (word & 0x8080808080808080ull) break;
      pos += 8;
    }
    if (pos >= text.size()) break;
    if (static_cast<unsigned char>(text[pos]) < 0x80) {
      ++pos;
      continue;
    }
    const std::size_t len = valid_sequence_len(text, pos);
    if (len == 0) return pos;
    pos += len;
  }
  return std::nullopt;
}

std::string lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  std::size_t pos = 0;
  while (pos < bytes.size()) {
    const SequenceScan scan = scan_sequence(bytes, pos);
    if (scan.complete) {
      out.append(bytes.substr(pos, scan.len));
    } else {
      out.append(kReplacementChar);
    }
    pos += scan.len;
  }
  return out;
}

void append_codepoint(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

char32_t next_codepoint(std::string_view text, std::size_t& pos) {
  const auto lead = static_cast<unsigned char>(text[pos]);
  if (lead < 0x80) {
    ++pos;
    return lead;
  }
  const std::size_t len = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : 2;
  char32_t cp = lead & (0x7F >> len);
  for (std::size_t i = 1; i < len && pos + i < text.size(); ++i) {
    cp = (cp << 6) | (static_cast<unsigned char>(text[pos + i]) & 0x3F);
  }
  pos += len;
  return cp;
}

}  // namespace tern::utf8
