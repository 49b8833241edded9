#include "grammar/utf8_ranges.h"

#include <string>

namespace tern::grammar {
namespace {

uint32_t max_of_length(int len) { return len == 1 ? 0x7F : len == 2 ? 0x7FF : len == 3 ? 0xFFFF : 0x10FFFF; }

// Splits [lo, hi] (same encoded length) until every byte position is an independent range, then emits it.
void split(uint32_t lo, uint32_t hi, std::vector<ByteRangeSeq>& out) {
  for (int len = 1; len < 4; ++len) {
    uint32_t boundary = max_of_length(len);
    if (lo <= boundary && hi > boundary) {
      split(lo, boundary, out);
      split(boundary + 1, hi, out);
      return;
    }
  }
  int len = hi <= 0x7F ? 1 : hi <= 0x7FF ? 2 : hi <= 0xFFFF ? 3 : 4;
  for (int i = 1; i < len; ++i) {
    uint32_t mask = (1u << (6 * i)) - 1;
    if ((lo & ~mask) != (hi & ~mask)) {
      if ((lo & mask) != 0) {
        split(lo, lo | mask, out);
        split((lo | mask) + 1, hi, out);
        return;
      }
      if ((hi & mask) != mask) {
        split(lo, (hi & ~mask) - 1, out);
        split(hi & ~mask, hi, out);
        return;
      }
    }
  }
  std::string lo_bytes, hi_bytes;
  append_utf8(lo_bytes, lo);
  append_utf8(hi_bytes, hi);
  ByteRangeSeq seq;
  seq.len = len;
  for (int i = 0; i < len; ++i) {
    seq.lo[i] = static_cast<uint8_t>(lo_bytes[i]);
    seq.hi[i] = static_cast<uint8_t>(hi_bytes[i]);
  }
  out.push_back(seq);
}

}  // namespace

std::vector<ByteRangeSeq> utf8_sequences(const std::vector<CodepointRange>& ranges) {
  std::vector<ByteRangeSeq> out;
  for (const auto& r : ranges) split(r.lo, r.hi, out);
  return out;
}

}  // namespace tern::grammar
