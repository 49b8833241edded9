#include "chat/big_int.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

namespace tern::chat {

BigInt::BigInt(int64_t value) {
  negative_ = value < 0;
  uint64_t magnitude = negative_ ? 0 - static_cast<uint64_t>(value) : static_cast<uint64_t>(value);
  while (magnitude > 0) {
    limbs_.push_back(static_cast<uint32_t>(magnitude % kBase));
    magnitude /= kBase;
  }
}

std::optional<BigInt> BigInt::from_decimal(const std::string& text) {
  size_t start = !text.empty() && (text[0] == '-' || text[0] == '+') ? 1 : 0;
  if (start == text.size() || !std::all_of(text.begin() + static_cast<std::ptrdiff_t>(start), text.end(), ::isdigit)) {
    return std::nullopt;
  }
  BigInt out;
  for (size_t end = text.size(); end > start;) {
    size_t begin = end >= start + 9 ? end - 9 : start;
    out.limbs_.push_back(static_cast<uint32_t>(std::stoul(text.substr(begin, end - begin))));
    end = begin;
  }
  out.negative_ = text[0] == '-';
  out.trim();
  return out;
}

void BigInt::trim() {
  while (!limbs_.empty() && limbs_.back() == 0) limbs_.pop_back();
  if (limbs_.empty()) negative_ = false;
}

std::optional<int64_t> BigInt::to_int64() const {
  if (limbs_.size() > 3) return std::nullopt;
  unsigned __int128 magnitude = 0;
  for (size_t i = limbs_.size(); i-- > 0;) magnitude = magnitude * kBase + limbs_[i];
  if (negative_ ? magnitude > static_cast<unsigned __int128>(INT64_MAX) + 1 : magnitude > INT64_MAX) return std::nullopt;
  return negative_ ? static_cast<int64_t>(0 - static_cast<uint64_t>(magnitude)) : static_cast<int64_t>(magnitude);
}

double BigInt::to_double() const {
  // Correctly rounded, as Python's float(int): through the decimal text. Past the float range: +-inf.
  return std::strtod(to_string().c_str(), nullptr);
}

std::string BigInt::to_string() const {
  if (limbs_.empty()) return "0";
  std::string out = negative_ ? "-" : "";
  out += std::to_string(limbs_.back());
  for (size_t i = limbs_.size() - 1; i-- > 0;) {
    std::string digits = std::to_string(limbs_[i]);
    out += std::string(9 - digits.size(), '0') + digits;
  }
  return out;
}

size_t BigInt::num_decimal_digits() const { return limbs_.size() * 9; }

int BigInt::compare_magnitude(const std::vector<uint32_t>& a, const std::vector<uint32_t>& b) {
  if (a.size() != b.size()) return a.size() < b.size() ? -1 : 1;
  for (size_t i = a.size(); i-- > 0;) {
    if (a[i] != b[i]) return a[i] < b[i] ? -1 : 1;
  }
  return 0;
}

std::vector<uint32_t> BigInt::add_magnitude(const std::vector<uint32_t>& a, const std::vector<uint32_t>& b) {
  std::vector<uint32_t> out;
  uint32_t carry = 0;
  for (size_t i = 0; i < std::max(a.size(), b.size()) || carry; ++i) {
    uint64_t sum = uint64_t{carry} + (i < a.size() ? a[i] : 0) + (i < b.size() ? b[i] : 0);
    out.push_back(static_cast<uint32_t>(sum % kBase));
    carry = static_cast<uint32_t>(sum / kBase);
  }
  return out;
}

// |a| - |b| for |a| >= |b|.
std::vector<uint32_t> BigInt::subtract_magnitude(const std::vector<uint32_t>& a, const std::vector<uint32_t>& b) {
  std::vector<uint32_t> out;
  int64_t borrow = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    int64_t difference = int64_t{a[i]} - borrow - (i < b.size() ? b[i] : 0);
    borrow = difference < 0;
    out.push_back(static_cast<uint32_t>(difference + (borrow ? kBase : 0)));
  }
  return out;
}

BigInt operator-(BigInt value) {
  if (!value.is_zero()) value.negative_ = !value.negative_;
  return value;
}

BigInt operator+(const BigInt& a, const BigInt& b) {
  BigInt out;
  if (a.negative_ == b.negative_) {
    out.limbs_ = BigInt::add_magnitude(a.limbs_, b.limbs_);
    out.negative_ = a.negative_;
  } else if (BigInt::compare_magnitude(a.limbs_, b.limbs_) >= 0) {
    out.limbs_ = BigInt::subtract_magnitude(a.limbs_, b.limbs_);
    out.negative_ = a.negative_;
  } else {
    out.limbs_ = BigInt::subtract_magnitude(b.limbs_, a.limbs_);
    out.negative_ = b.negative_;
  }
  out.trim();
  return out;
}

BigInt operator-(const BigInt& a, const BigInt& b) { return a + (-b); }

BigInt operator*(const BigInt& a, const BigInt& b) {
  BigInt out;
  if (a.is_zero() || b.is_zero()) return out;
  std::vector<uint64_t> product(a.limbs_.size() + b.limbs_.size() + 1, 0);
  for (size_t i = 0; i < a.limbs_.size(); ++i) {
    uint64_t carry = 0;
    for (size_t j = 0; j < b.limbs_.size() || carry; ++j) {
      uint64_t current = product[i + j] + carry + (j < b.limbs_.size() ? uint64_t{a.limbs_[i]} * b.limbs_[j] : 0);
      product[i + j] = current % BigInt::kBase;
      carry = current / BigInt::kBase;
    }
  }
  out.limbs_.assign(product.begin(), product.end());
  out.negative_ = a.negative_ != b.negative_;
  out.trim();
  return out;
}

void BigInt::floor_divmod(const BigInt& a, const BigInt& b, BigInt& quotient, BigInt& remainder) {
  // Schoolbook long division of magnitudes, one base-10^9 digit at a time (each found by binary search).
  BigInt divisor = b;
  divisor.negative_ = false;
  BigInt current;
  std::vector<uint32_t> digits(a.limbs_.size(), 0);
  for (size_t i = a.limbs_.size(); i-- > 0;) {
    current.limbs_.insert(current.limbs_.begin(), a.limbs_[i]);
    current.trim();
    uint32_t low = 0;
    uint32_t high = kBase - 1;
    while (low < high) {
      uint32_t middle = low + (high - low + 1) / 2;
      if (compare_magnitude((divisor * BigInt(middle)).limbs_, current.limbs_) <= 0) {
        low = middle;
      } else {
        high = middle - 1;
      }
    }
    digits[i] = low;
    if (low > 0) current = current - divisor * BigInt(low);
  }
  quotient.limbs_ = std::move(digits);
  quotient.negative_ = a.negative_ != b.negative_;
  quotient.trim();
  remainder = current;
  remainder.negative_ = a.negative_;
  remainder.trim();
  // Truncated to floored: a non-zero remainder whose sign differs from the divisor's moves one step.
  if (!remainder.is_zero() && remainder.negative_ != b.negative_) {
    quotient = quotient - BigInt(1);
    remainder = remainder + b;
  }
}

int BigInt::compare(const BigInt& a, const BigInt& b) {
  if (a.negative_ != b.negative_) return a.negative_ ? -1 : 1;
  int magnitude = compare_magnitude(a.limbs_, b.limbs_);
  return a.negative_ ? -magnitude : magnitude;
}

}  // namespace tern::chat
