#include "model/ue8m0_quantization.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"

namespace tern {

namespace {

constexpr float kE4m3Max = 448.0f;
constexpr float kE2m1Max = 6.0f;
// kernel.py's floors on a block's amax, which keep a block of zeros (and the scale) finite.
constexpr float kFp8AmaxFloor = 1e-4f;
const float kFp4AmaxFloor = std::ldexp(kE2m1Max, -126);

// ceil(log2(x)) for x > 0 from its float32 bits, as kernel.py's fast_log2_ceil: the exponent, plus one unless the
// mantissa bits are zero (a subnormal x gives -126).
int log2_ceil(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof(bits));
  return static_cast<int>((bits >> 23) & 0xff) - 127 + ((bits & 0x7fffff) != 0 ? 1 : 0);
}

// The e8m0 byte of the scale 2^ceil(log2(amax / format_max)), with kernel.py's float32 product amax x (1 / max).
uint8_t scale_exponent(float amax, float format_max) {
  return static_cast<uint8_t>(std::clamp(log2_ceil(amax * (1.0f / format_max)), -127, 127) + 127);
}

// The e2m1 code nearest x (|x| <= 6), ties to the even code, the sign in bit 3.
uint8_t to_e2m1(float x) {
  static const float magnitudes[] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const float a = std::abs(x);
  uint8_t code = 0;
  for (uint8_t c = 1; c < 8; ++c) {
    const float here = std::abs(a - magnitudes[c]), best = std::abs(a - magnitudes[code]);
    if (here < best || (here == best && c % 2 == 0)) code = c;
  }
  return static_cast<uint8_t>(code | (std::signbit(x) ? 0x8 : 0));
}

// The weight's values as float32, checking shape, dtype and that every value is finite.
std::vector<float> weight_values(const TensorInfo& weight, const char* format) {
  if (weight.shape.size() != 2) {
    fail("{}: tensor '{}' has shape {}; {} quantization takes 2-D [out, in] weights", weight.file.string(),
         weight.name, shape_string(weight.shape), format);
  }
  if (weight.dtype != DType::BF16 && weight.dtype != DType::F16 && weight.dtype != DType::F32) {
    fail("{}: tensor '{}' is {}; {} quantization takes BF16, F16 or F32 weights", weight.file.string(), weight.name,
         dtype_name(weight.dtype), format);
  }
  std::vector<float> values(static_cast<size_t>(weight.numel()));
  convert_to_f32(weight.dtype, weight.data, values.data(), values.size());
  const auto bad = std::find_if(values.begin(), values.end(), [](float x) { return !std::isfinite(x); });
  if (bad != values.end()) {
    const int64_t at = bad - values.begin();
    fail("{}: tensor '{}' holds {} at [{}, {}]; {} quantization needs finite weights", weight.file.string(),
         weight.name, *bad, at / weight.shape[1], at % weight.shape[1], format);
  }
  return values;
}

}  // namespace

Ue8m0Weight quantize_fp8_ue8m0(const TensorInfo& weight, int64_t block_rows, int64_t block_columns) {
  const std::vector<float> values = weight_values(weight, "FP8");
  if (block_rows <= 0 || block_columns <= 0) fail("FP8 quantization: blocks of {}x{}", block_rows, block_columns);
  const int64_t rows = weight.shape[0], columns = weight.shape[1];
  const int64_t grid_rows = (rows + block_rows - 1) / block_rows;
  const int64_t grid_columns = (columns + block_columns - 1) / block_columns;
  Ue8m0Weight out;
  out.codes.resize(values.size());
  out.dequantized.resize(values.size());
  out.exponents.resize(static_cast<size_t>(grid_rows * grid_columns));
  out.scale_shape = {grid_rows, grid_columns};
  for (int64_t br = 0; br < grid_rows; ++br) {
    for (int64_t bc = 0; bc < grid_columns; ++bc) {
      const int64_t r_end = std::min(rows, (br + 1) * block_rows), c_end = std::min(columns, (bc + 1) * block_columns);
      float amax = kFp8AmaxFloor;
      for (int64_t r = br * block_rows; r < r_end; ++r) {
        for (int64_t c = bc * block_columns; c < c_end; ++c) amax = std::max(amax, std::abs(values[r * columns + c]));
      }
      const uint8_t exponent = scale_exponent(amax, kE4m3Max);
      out.exponents[br * grid_columns + bc] = exponent;
      const float scale = std::ldexp(1.0f, exponent - 127);
      for (int64_t r = br * block_rows; r < r_end; ++r) {
        for (int64_t c = bc * block_columns; c < c_end; ++c) {
          const int64_t i = r * columns + c;
          const uint8_t code = f32_to_f8_e4m3(std::clamp(values[i] / scale, -kE4m3Max, kE4m3Max));
          out.codes[i] = code;
          out.dequantized[i] = f8_e4m3_to_f32(code) * scale;
        }
      }
    }
  }
  return out;
}

Ue8m0Weight quantize_fp4_ue8m0(const TensorInfo& weight, int64_t group) {
  const std::vector<float> values = weight_values(weight, "FP4");
  const int64_t rows = weight.shape[0], columns = weight.shape[1];
  if (group <= 0 || group % 2 != 0 || columns % group != 0) {
    fail("{}: tensor '{}' has {} columns; FP4 quantization takes a multiple of its group of {}", weight.file.string(),
         weight.name, columns, group);
  }
  const int64_t groups = columns / group;
  Ue8m0Weight out;
  out.codes.assign(values.size() / 2, 0);
  out.dequantized.resize(values.size());
  out.exponents.resize(static_cast<size_t>(rows * groups));
  out.scale_shape = {rows, groups};
  for (int64_t g = 0; g < rows * groups; ++g) {
    const int64_t first = g * group;  // groups tile each row, rows are consecutive
    float amax = kFp4AmaxFloor;
    for (int64_t j = 0; j < group; ++j) amax = std::max(amax, std::abs(values[first + j]));
    const uint8_t exponent = scale_exponent(amax, kE2m1Max);
    out.exponents[g] = exponent;
    const float scale = std::ldexp(1.0f, exponent - 127);
    for (int64_t j = 0; j < group; ++j) {
      const int64_t i = first + j;
      const uint8_t code = to_e2m1(std::clamp(values[i] / scale, -kE2m1Max, kE2m1Max));
      out.codes[i / 2] |= static_cast<uint8_t>(i % 2 == 0 ? code : code << 4);
      out.dequantized[i] = f4_e2m1_to_f32(code) * scale;
    }
  }
  return out;
}

}  // namespace tern
