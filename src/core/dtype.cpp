#include "core/dtype.h"

#include <array>
#include <cmath>
#include <limits>

#include "core/error.h"

namespace tern {

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::F32: return 4;
    case DType::F16: return 2;
    case DType::BF16: return 2;
    case DType::I32: return 4;
    case DType::I64: return 8;
    case DType::F8_E4M3: return 1;
    case DType::F8_E8M0: return 1;
    case DType::U8: return 1;
    case DType::I8: return 1;
    case DType::F4_E2M1: fail("F4_E2M1 has no byte size per element: two are packed into a byte");
  }
  fail("unknown dtype {}", static_cast<int>(dtype));
}

size_t dtype_bytes(DType dtype, int64_t count) {
  if (dtype != DType::F4_E2M1) return static_cast<size_t>(count) * dtype_size(dtype);
  if (count % 2 != 0) fail("{} F4_E2M1 elements are not whole bytes", count);
  return static_cast<size_t>(count / 2);
}

std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::F32: return "F32";
    case DType::F16: return "F16";
    case DType::BF16: return "BF16";
    case DType::I32: return "I32";
    case DType::I64: return "I64";
    case DType::F8_E4M3: return "F8_E4M3";
    case DType::F8_E8M0: return "F8_E8M0";
    case DType::U8: return "U8";
    case DType::I8: return "I8";
    case DType::F4_E2M1: return "F4_E2M1";
  }
  return "?";
}

float f16_to_f32(uint16_t bits) {
  const uint32_t sign = (bits & 0x8000u) << 16;
  uint32_t exponent = (bits >> 10) & 0x1f;
  uint32_t mantissa = bits & 0x3ffu;
  uint32_t out;
  if (exponent == 0x1f) {
    out = sign | 0x7f800000u | (mantissa << 13);
  } else if (exponent == 0) {
    if (mantissa == 0) {
      out = sign;
    } else {  // subnormal: renormalize
      exponent = 127 - 15 + 1;
      while ((mantissa & 0x400u) == 0) {
        mantissa <<= 1;
        --exponent;
      }
      out = sign | (exponent << 23) | ((mantissa & 0x3ffu) << 13);
    }
  } else {
    out = sign | ((exponent + 127 - 15) << 23) | (mantissa << 13);
  }
  float value;
  std::memcpy(&value, &out, sizeof(value));
  return value;
}

namespace {

float decode_e4m3(uint8_t bits) {
  const float sign = (bits & 0x80u) ? -1.0f : 1.0f;
  const int exponent = (bits >> 3) & 0xf;
  const int mantissa = bits & 0x7;
  // e4m3fn spends the all-ones pattern on NaN instead of infinities: exponent 15 is a normal binade otherwise.
  if (exponent == 0xf && mantissa == 0x7) return std::numeric_limits<float>::quiet_NaN();
  if (exponent == 0) return sign * std::ldexp(static_cast<float>(mantissa), -9);  // subnormal: mantissa/8 x 2^-6
  return sign * std::ldexp(static_cast<float>(8 + mantissa), exponent - 7 - 3);
}

// Every code's value: the CPU backend dequantizes a block-FP8 checkpoint's billions of codes at load.
const std::array<float, 256>& e4m3_values() {
  static const std::array<float, 256> values = [] {
    std::array<float, 256> table{};
    for (int code = 0; code < 256; ++code) table[static_cast<size_t>(code)] = decode_e4m3(static_cast<uint8_t>(code));
    return table;
  }();
  return values;
}

// Every code's value, for the same reason: a real DeepSeek-V4 has billions of FP4 expert weights.
constexpr float kE2m1Values[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                   -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

}  // namespace

float f8_e4m3_to_f32(uint8_t bits) { return e4m3_values()[bits]; }

float f8_e8m0_to_f32(uint8_t bits) {
  if (bits == 0xff) return std::numeric_limits<float>::quiet_NaN();
  return std::ldexp(1.0f, static_cast<int>(bits) - 127);  // 2^-127 is a float32 subnormal, still exact
}

float f4_e2m1_to_f32(uint8_t nibble) { return kE2m1Values[nibble & 0xfu]; }

void convert_to_f32(DType dtype, const void* src, float* dst, size_t count) {
  switch (dtype) {
    case DType::F32:
      std::memcpy(dst, src, count * sizeof(float));
      return;
    case DType::BF16: {
      const auto* in = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < count; ++i) dst[i] = bf16_to_f32(in[i]);
      return;
    }
    case DType::F16: {
      const auto* in = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < count; ++i) dst[i] = f16_to_f32(in[i]);
      return;
    }
    case DType::I32: {
      const auto* in = static_cast<const int32_t*>(src);
      for (size_t i = 0; i < count; ++i) dst[i] = static_cast<float>(in[i]);
      return;
    }
    case DType::I64: {
      const auto* in = static_cast<const int64_t*>(src);
      for (size_t i = 0; i < count; ++i) dst[i] = static_cast<float>(in[i]);
      return;
    }
    case DType::F8_E4M3: {
      const auto* in = static_cast<const uint8_t*>(src);
      const std::array<float, 256>& values = e4m3_values();
      for (size_t i = 0; i < count; ++i) dst[i] = values[in[i]];
      return;
    }
    case DType::F8_E8M0: {
      const auto* in = static_cast<const uint8_t*>(src);
      for (size_t i = 0; i < count; ++i) dst[i] = f8_e8m0_to_f32(in[i]);
      return;
    }
    case DType::U8: {
      const auto* in = static_cast<const uint8_t*>(src);
      for (size_t i = 0; i < count; ++i) dst[i] = static_cast<float>(in[i]);
      return;
    }
    case DType::I8: {
      const auto* in = static_cast<const int8_t*>(src);
      for (size_t i = 0; i < count; ++i) dst[i] = static_cast<float>(in[i]);
      return;
    }
    case DType::F4_E2M1: {
      const auto* in = static_cast<const uint8_t*>(src);
      for (size_t i = 0; i + 1 < count; i += 2) {
        dst[i] = kE2m1Values[in[i / 2] & 0xf];
        dst[i + 1] = kE2m1Values[in[i / 2] >> 4];
      }
      if (count % 2 != 0) dst[count - 1] = kE2m1Values[in[count / 2] & 0xf];
      return;
    }
  }
}

}  // namespace tern
