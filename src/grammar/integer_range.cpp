#include "grammar/integer_range.h"

#include <algorithm>
#include <vector>

#include "core/error.h"

namespace tern::grammar {
namespace {

std::string quoted(const std::string& digits) { return "\"" + digits + "\""; }

std::string any_digits(size_t count) {
  if (count == 0) return "";
  return count == 1 ? "[0-9]" : "[0-9]{" + std::to_string(count) + "}";
}

std::string digit_class(char lo, char hi) {
  if (lo == hi) return quoted(std::string(1, lo));
  return std::string("[") + lo + "-" + hi + "]";
}

std::string join_choice(const std::vector<std::string>& alternatives) {
  if (alternatives.size() == 1) return alternatives[0];
  std::string out = "(";
  for (size_t i = 0; i < alternatives.size(); ++i) out += (i ? " | " : "") + alternatives[i];
  return out + ")";
}

// Digit strings of s.size() digits (leading zeros allowed) that are >= s, or <= s.
std::string digits_at_least(const std::string& s) {
  if (s.empty()) return "\"\"";
  if (std::all_of(s.begin(), s.end(), [](char c) { return c == '0'; })) return any_digits(s.size());
  std::vector<std::string> alternatives{quoted(s.substr(0, 1)) + " " + digits_at_least(s.substr(1))};
  if (s[0] < '9') alternatives.push_back(digit_class(static_cast<char>(s[0] + 1), '9') + " " + any_digits(s.size() - 1));
  return join_choice(alternatives);
}

std::string digits_at_most(const std::string& s) {
  if (s.empty()) return "\"\"";
  if (std::all_of(s.begin(), s.end(), [](char c) { return c == '9'; })) return any_digits(s.size());
  std::vector<std::string> alternatives{quoted(s.substr(0, 1)) + " " + digits_at_most(s.substr(1))};
  if (s[0] > '0') alternatives.push_back(digit_class('0', static_cast<char>(s[0] - 1)) + " " + any_digits(s.size() - 1));
  return join_choice(alternatives);
}

// x <= y, both with the same number of digits.
std::string same_length_range(const std::string& x, const std::string& y) {
  if (x == y) return quoted(x);
  size_t p = 0;
  while (x[p] == y[p]) ++p;
  std::string prefix = p ? quoted(x.substr(0, p)) + " " : "";
  std::string x_rest = x.substr(p + 1), y_rest = y.substr(p + 1);
  size_t rest_len = x_rest.size();
  bool x_zeros = std::all_of(x_rest.begin(), x_rest.end(), [](char c) { return c == '0'; });
  bool y_nines = std::all_of(y_rest.begin(), y_rest.end(), [](char c) { return c == '9'; });
  if (x_zeros && y_nines) return prefix + digit_class(x[p], y[p]) + " " + any_digits(rest_len);
  std::vector<std::string> alternatives{quoted(x.substr(p, 1)) + " " + digits_at_least(x_rest)};
  if (x[p] + 1 <= y[p] - 1) {
    alternatives.push_back(digit_class(static_cast<char>(x[p] + 1), static_cast<char>(y[p] - 1)) + " " + any_digits(rest_len));
  }
  alternatives.push_back(quoted(y.substr(p, 1)) + " " + digits_at_most(y_rest));
  return prefix + join_choice(alternatives);
}

}  // namespace

std::string unsigned_range_ebnf(int64_t lo, int64_t hi) {
  std::vector<std::string> alternatives;
  int64_t length_start = 1;  // smallest number with `digits` digits (0 for one digit)
  for (size_t digits = 1; digits <= 16; ++digits, length_start *= 10) {
    int64_t length_end = length_start * 10 - 1;
    int64_t a = std::max(lo, digits == 1 ? int64_t{0} : length_start);
    int64_t b = std::min(hi, length_end);
    if (a <= b) alternatives.push_back(same_length_range(std::to_string(a), std::to_string(b)));
  }
  return join_choice(alternatives);
}

std::string integer_range_ebnf(std::optional<int64_t> lo, std::optional<int64_t> hi) {
  int64_t low = lo ? std::max(*lo, -kMaxJsonIntegerMagnitude) : -kMaxJsonIntegerMagnitude;
  int64_t high = hi ? std::min(*hi, kMaxJsonIntegerMagnitude) : kMaxJsonIntegerMagnitude;
  if (low > high) fail("integer range [{}, {}] is empty (magnitudes are limited to 16 digits)", low, high);
  std::vector<std::string> alternatives;
  if (high >= 0) alternatives.push_back(unsigned_range_ebnf(std::max<int64_t>(low, 0), high));
  if (low < 0) alternatives.push_back("\"-\" " + unsigned_range_ebnf(std::max<int64_t>(1, -std::min<int64_t>(high, -1)), -low));
  return join_choice(alternatives);
}

}  // namespace tern::grammar
