#pragma once
// JSON Schema "format" values the converter enforces. Each string format is a regular expression whose whole matches
// all validate under ajv-formats' full formats (the reference the tests use); where the format's full language is
// not regular or not worth its size (leap years, host names' total length, IPv6 with embedded IPv4) it is a subset.
// Formats not listed here are annotations: the string is unconstrained (docs/structured_output.md names them).
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tern::grammar {

// The regex for a string format, or nullopt for a format left unconstrained.
std::optional<std::string> string_format_regex(std::string_view format);

// int32 and int64 (OpenAPI) on numbers: the value must be an integer in this range.
struct IntegerFormatRange {
  int64_t lo = 0;
  int64_t hi = 0;
};
std::optional<IntegerFormatRange> integer_format_range(std::string_view format);

}  // namespace tern::grammar
