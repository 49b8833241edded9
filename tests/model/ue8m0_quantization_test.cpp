// The power-of-two-scale quantizers (DeepSeek-V4's kernel.py scheme) against blocks worked out by hand: the scale is
// 2^ceil(log2(amax / max)), not rounded up when amax / max is already a power of two, floored for blocks of zeros;
// codes are the nearest, ties to even; FP4 pairs pack element 2j into the low nibble.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "model/ue8m0_quantization.h"

namespace tern {
namespace {

TensorInfo f32_tensor(const std::vector<float>& values, std::vector<int64_t> shape) {
  return {"w", "w.safetensors", DType::F32, std::move(shape), reinterpret_cast<const std::byte*>(values.data()),
          values.size() * sizeof(float), {}};
}

TEST(Ue8m0QuantizationTest, Fp8BlocksWorkedByHand) {
  // 3 x 3 in 2 x 2 blocks: [0, 0] amax 3 -> 3 / 448 in (2^-8, 2^-7] -> 2^-7; [0, 1] amax 7 -> 7 / 448 = 2^-6
  // exactly; [1, 0] all zeros -> the 1e-4 floor -> 2^ceil(log2(1e-4 / 448)) = 2^-22; [1, 1] amax 0.5 -> 2^-9.
  const std::vector<float> values = {1.0f, -3.0f, 7.0f,   //
                                     17.0f / 128, 0.5f, 0.0f,  //
                                     0.0f, 0.0f, -0.5f};
  const Ue8m0Weight q = quantize_fp8_ue8m0(f32_tensor(values, {3, 3}), 2, 2);
  ASSERT_EQ(q.scale_shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(q.exponents, (std::vector<uint8_t>{127 - 7, 127 - 6, 127 - 22, 127 - 9}));
  // x / 2^-7: 128, -384, 17 (a tie between e4m3's 16 and 18: the even 16), 64; 7 / 2^-6 = 448, e4m3's largest.
  const std::vector<float> expected = {1.0f, -3.0f, 7.0f, 16.0f / 128, 0.5f, 0.0f, 0.0f, 0.0f, -0.5f};
  EXPECT_EQ(q.dequantized, expected);
  EXPECT_EQ(q.codes[2], 0x7e);  // 448
  EXPECT_EQ(q.codes[1], 0x80 | 0x7c);  // -384 = -1.5 x 2^8: exponent bits 15, mantissa 100
  for (size_t i = 0; i < values.size(); ++i) {
    const int64_t block = (static_cast<int64_t>(i) / 3 / 2) * 2 + static_cast<int64_t>(i) % 3 / 2;
    EXPECT_EQ(q.dequantized[i], f8_e4m3_to_f32(q.codes[i]) * std::ldexp(1.0f, q.exponents[block] - 127)) << i;
  }
}

TEST(Ue8m0QuantizationTest, Fp4GroupsWorkedByHand) {
  // Groups of 4. Row 0: amax 6 -> 6 / 6 = 2^0; 1 -> code 2, -2.5 (a tie between 2 and 3: the even code 4, 2) ->
  // 0xc, 0.25 (a tie between 0 and 0.5) -> 0, 6 -> 7. Row 1: amax 0.7 -> 0.7 / 6 in (2^-4, 2^-3] -> 2^-3; 0.7 / 0.125
  // = 5.6 -> 6, -0.1 / 0.125 = -0.8 -> -1, 0.3 / 0.125 = 2.4 -> 2, and 0 -> 0. Row 2: zeros -> the 6 x 2^-126 floor.
  const std::vector<float> values = {1.0f, -2.5f, 0.25f, 6.0f, 0.7f, -0.1f, 0.3f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
  const Ue8m0Weight q = quantize_fp4_ue8m0(f32_tensor(values, {3, 4}), 4);
  ASSERT_EQ(q.scale_shape, (std::vector<int64_t>{3, 1}));
  EXPECT_EQ(q.exponents, (std::vector<uint8_t>{127, 127 - 3, 1}));
  EXPECT_EQ(q.codes, (std::vector<uint8_t>{0xc2, 0x70, 0xa7, 0x04, 0x00, 0x00}));
  const std::vector<float> expected = {1.0f, -2.0f, 0.0f, 6.0f, 0.75f, -0.125f, 0.25f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
  EXPECT_EQ(q.dequantized, expected);
}

TEST(Ue8m0QuantizationTest, RefusesWhatItCannotQuantize) {
  const std::vector<float> values = {1.0f, NAN, 0.0f, 0.0f};
  try {
    quantize_fp8_ue8m0(f32_tensor(values, {2, 2}));
    FAIL() << "a NaN was quantized";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("w.safetensors: tensor 'w' holds nan at [0, 1]"), std::string::npos)
        << e.what();
  }
  const std::vector<float> three = {1.0f, 2.0f, 3.0f};
  EXPECT_THROW(quantize_fp4_ue8m0(f32_tensor(three, {1, 3}), 2), Error);  // columns not a multiple of the group
  EXPECT_THROW(quantize_fp8_ue8m0(f32_tensor(three, {3})), Error);        // not 2-D
}

}  // namespace
}  // namespace tern
