#pragma once
// CLI11 validators for numeric flags whose errors read as sentences: CLI11's own ranges (NonNegativeNumber,
// PositiveNumber) print their bounds in full, DBL_MAX as 309 digits, and call a word that is not a number out of
// range. The help's type hints stay CLI11's (NONNEGATIVE, POSITIVE, FLOAT in [a - b]).
#include <CLI/CLI.hpp>

namespace tern::cli {

CLI::Validator non_negative();                 // 0 or more
CLI::Validator positive();                     // more than 0
CLI::Validator between(double min, double max);  // min to max, both included

}  // namespace tern::cli
