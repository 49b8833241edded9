#pragma once
// Element types of tensors in checkpoints and on backends, their conversions to float32, and float32 to e4m3.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace tern {

// F8_E4M3 is OCP FP8 e4m3fn (PyTorch's float8_e4m3fn): no infinities, 0x7f and 0xff are NaN, 448 the largest value.
// F8_E8M0 is OCP MX's e8m0 scale (PyTorch's float8_e8m0fnu): 2^(bits - 127), 0xff NaN, no sign and no zero.
// U8 is safetensors' raw bytes, as MXFP4 checkpoints store their packed blocks and e8m0 scales; I8 the signed bytes
// in which DeepSeek-V4's released checkpoints store their packed FP4 experts (torch.float4_e2m1fn_x2 viewed as int8).
// F4_E2M1 is OCP MX's FP4 (1 sign, 2 exponent, 1 mantissa bit: +-{0, 0.5, 1, 1.5, 2, 3, 4, 6}) packed two to a byte,
// element 2i in the low nibble of byte i: the elements of an MXFP4 weight, which only checkpoint tensors hold.
enum class DType : uint8_t { F32, F16, BF16, I32, I64, F8_E4M3, F8_E8M0, U8, I8, F4_E2M1 };

// Bytes per element; fails for F4_E2M1, whose elements are half a byte.
size_t dtype_size(DType dtype);
// Bytes of `count` elements (F4_E2M1: count / 2, count even).
size_t dtype_bytes(DType dtype, int64_t count);
std::string_view dtype_name(DType dtype);

inline float bf16_to_f32(uint16_t bits) {
  uint32_t wide = static_cast<uint32_t>(bits) << 16;
  float value;
  std::memcpy(&value, &wide, sizeof(value));
  return value;
}

// Round to nearest even, as PyTorch does; NaN stays NaN.
inline uint16_t f32_to_bf16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

float f16_to_f32(uint16_t bits);
float f8_e4m3_to_f32(uint8_t bits);
float f8_e8m0_to_f32(uint8_t bits);
float f4_e2m1_to_f32(uint8_t nibble);  // the low 4 bits

// The nearest e4m3fn code to `value`, ties to the even code (OCP FP8's round-to-nearest-even). Magnitudes beyond 448
// and infinities saturate to +-448, as the FP8 weight quantizers of transformers and vLLM clamp before their cast
// (e4m3fn has no infinity); NaN gives NaN (0x7f with the sign). Inline and without branches, so that loops over
// many values vectorize (online FP8 quantizes a model's billions of weights at load).
inline uint8_t f32_to_f8_e4m3(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  const uint32_t sign = (bits >> 24) & 0x80u;
  const uint32_t magnitude = bits & 0x7fffffffu;
  float a;
  std::memcpy(&a, &magnitude, sizeof(a));
  // Subnormal codes are multiples of 2^-9: adding 2^14 (whose float32 ulp is 2^-9) rounds |value| to one, ties to
  // even, and leaves the multiple in the low bits (8, the carry, is 2^-6: the first normal code).
  const float shifted = a + 16384.0f;
  uint32_t shifted_bits;
  std::memcpy(&shifted_bits, &shifted, sizeof(shifted_bits));
  const uint32_t subnormal = shifted_bits - 0x46800000u;  // the bits of 2^14
  // Normal codes keep 3 of float32's 23 mantissa bits, rounded to nearest even; a carry moves to the next exponent.
  const uint32_t normal = ((magnitude + 0x7ffffu + ((magnitude >> 20) & 1u)) >> 20) - (120u << 3);
  uint32_t code = magnitude < 0x3c800000u ? subnormal : normal;  // below 2^-6
  code = code < 0x7eu ? code : 0x7eu;                             // saturates at 448, infinities too
  code = magnitude > 0x7f800000u ? 0x7fu : code;                  // NaN
  return static_cast<uint8_t>(sign | code);
}

// Converts `count` elements of `src` (of type `dtype`) to float32; FP8 elements as they are, without the block scales
// of a quantized weight (dequantize_to_f32 in tensor_info.h applies those). F4_E2M1 reads count / 2 bytes.
void convert_to_f32(DType dtype, const void* src, float* dst, size_t count);

}  // namespace tern
