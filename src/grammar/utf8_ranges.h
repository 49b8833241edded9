#pragma once
// Code point ranges as UTF-8 byte-range sequences: the bytes a character class matches, for the byte-level automaton.
#include <cstdint>
#include <vector>

#include "grammar/grammar_expr.h"

namespace tern::grammar {

struct ByteRangeSeq {
  int len = 0;       // 1 to 4 bytes
  uint8_t lo[4]{};   // byte i must lie in [lo[i], hi[i]]
  uint8_t hi[4]{};
};

// Every code point in `ranges` matches exactly one of the returned sequences, and nothing else does.
std::vector<ByteRangeSeq> utf8_sequences(const std::vector<CodepointRange>& ranges);

}  // namespace tern::grammar
