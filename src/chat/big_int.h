#pragma once
// Python's unbounded int, for the template values that leave int64 (`2 ** 64`, `10 ** 20 + 1`, a JSON number
// above INT64_MAX): exact + - * // % ** and comparison, printed in decimal. Values that fit int64 stay plain
// int64 in Value; this type only holds the ones that do not.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tern::chat {

class BigInt {
 public:
  BigInt() = default;
  explicit BigInt(int64_t value);
  // Decimal digits with an optional sign; nullopt if `text` is not one.
  static std::optional<BigInt> from_decimal(const std::string& text);

  bool is_negative() const { return negative_; }
  bool is_zero() const { return limbs_.empty(); }
  std::optional<int64_t> to_int64() const;
  double to_double() const;  // +-inf past the float range
  std::string to_string() const;
  size_t num_decimal_digits() const;  // an upper bound, for size limits

  friend BigInt operator-(BigInt value);
  friend BigInt operator+(const BigInt& a, const BigInt& b);
  friend BigInt operator-(const BigInt& a, const BigInt& b);
  friend BigInt operator*(const BigInt& a, const BigInt& b);
  // Python's floor division and modulo (the remainder takes the divisor's sign). `b` must not be zero.
  static void floor_divmod(const BigInt& a, const BigInt& b, BigInt& quotient, BigInt& remainder);
  // -1, 0 or 1 as a < b, a == b, a > b.
  static int compare(const BigInt& a, const BigInt& b);

 private:
  static constexpr uint32_t kBase = 1'000'000'000;  // limbs hold 9 decimal digits, least significant first

  static int compare_magnitude(const std::vector<uint32_t>& a, const std::vector<uint32_t>& b);
  static std::vector<uint32_t> add_magnitude(const std::vector<uint32_t>& a, const std::vector<uint32_t>& b);
  static std::vector<uint32_t> subtract_magnitude(const std::vector<uint32_t>& a, const std::vector<uint32_t>& b);
  void trim();

  bool negative_ = false;
  std::vector<uint32_t> limbs_;
};

}  // namespace tern::chat
