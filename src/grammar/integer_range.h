#pragma once
// EBNF for the decimal integers in a range, as JSON writes them (no leading zeros, no "-0"): the digit-by-digit
// decomposition regex generators use. Magnitudes are capped at 16 digits so every value stays a finite double.
#include <cstdint>
#include <optional>
#include <string>

namespace tern::grammar {

inline constexpr int64_t kMaxJsonIntegerMagnitude = 9'999'999'999'999'999;  // 16 digits

// Integers in [lo, hi]; a missing bound means "as far as 16 digits go". Throws tern::Error for an empty range.
std::string integer_range_ebnf(std::optional<int64_t> lo, std::optional<int64_t> hi);

// Non-negative integers in [lo, hi], 0 <= lo <= hi <= kMaxJsonIntegerMagnitude.
std::string unsigned_range_ebnf(int64_t lo, int64_t hi);

}  // namespace tern::grammar
