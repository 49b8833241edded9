// FP8 element types against the OCP 8-bit floating point spec (what PyTorch's float8_e4m3fn and float8_e8m0fnu
// implement): e4m3fn has no infinities and one NaN pattern per sign, e8m0 is a bare power-of-two exponent.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "core/dtype.h"
#include "core/error.h"

namespace tern {
namespace {

TEST(DtypeTest, E4m3DecodesZerosSubnormalsNormalsAndTheLargestValue) {
  EXPECT_EQ(f8_e4m3_to_f32(0x00), 0.0f);
  EXPECT_TRUE(std::signbit(f8_e4m3_to_f32(0x80)));
  EXPECT_EQ(f8_e4m3_to_f32(0x01), 0.001953125f);  // 2^-9, the smallest subnormal
  EXPECT_EQ(f8_e4m3_to_f32(0x07), 0.013671875f);  // 7 x 2^-9, the largest subnormal
  EXPECT_EQ(f8_e4m3_to_f32(0x08), 0.015625f);     // 2^-6, the smallest normal
  EXPECT_EQ(f8_e4m3_to_f32(0x38), 1.0f);
  EXPECT_EQ(f8_e4m3_to_f32(0x3c), 1.5f);
  EXPECT_EQ(f8_e4m3_to_f32(0xc0), -2.0f);
  EXPECT_EQ(f8_e4m3_to_f32(0x77), 240.0f);
  EXPECT_EQ(f8_e4m3_to_f32(0x78), 256.0f);  // exponent 15 is a normal binade: no infinity in e4m3fn
  EXPECT_EQ(f8_e4m3_to_f32(0x7e), 448.0f);
  EXPECT_EQ(f8_e4m3_to_f32(0xfe), -448.0f);
}

TEST(DtypeTest, E4m3HasTwoNansNoInfinitiesAndIncreasesWithItsCode) {
  int nans = 0;
  for (int code = 0; code < 256; ++code) {
    const float value = f8_e4m3_to_f32(static_cast<uint8_t>(code));
    EXPECT_FALSE(std::isinf(value)) << code;
    if (std::isnan(value)) ++nans;
  }
  EXPECT_EQ(nans, 2);
  EXPECT_TRUE(std::isnan(f8_e4m3_to_f32(0x7f)));
  EXPECT_TRUE(std::isnan(f8_e4m3_to_f32(0xff)));
  for (int code = 1; code < 0x7f; ++code) {
    EXPECT_LT(f8_e4m3_to_f32(static_cast<uint8_t>(code - 1)), f8_e4m3_to_f32(static_cast<uint8_t>(code))) << code;
    EXPECT_EQ(f8_e4m3_to_f32(static_cast<uint8_t>(code | 0x80)), -f8_e4m3_to_f32(static_cast<uint8_t>(code)));
  }
}

// Encoding: each code's value encodes back to the code; a value between two neighbouring codes goes to the nearer,
// the midpoint to the code with the even mantissa (round to nearest even); beyond 448 it saturates.
TEST(DtypeTest, E4m3EncodesToTheNearestCodeTiesToEven) {
  for (int code = 0; code < 0x7f; ++code) {
    const auto bits = static_cast<uint8_t>(code);
    EXPECT_EQ(f32_to_f8_e4m3(f8_e4m3_to_f32(bits)), bits) << code;
    EXPECT_EQ(f32_to_f8_e4m3(-f8_e4m3_to_f32(bits)), bits | 0x80) << code;
  }
  for (int code = 1; code < 0x7f; ++code) {
    const float below = f8_e4m3_to_f32(static_cast<uint8_t>(code - 1));
    const float above = f8_e4m3_to_f32(static_cast<uint8_t>(code));
    const float midpoint = (below + above) / 2;  // exact: the codes' values have at most 4 significant bits
    const int even = code % 2 == 0 ? code : code - 1;
    EXPECT_EQ(f32_to_f8_e4m3(midpoint), even) << code;
    EXPECT_EQ(f32_to_f8_e4m3(-midpoint), even | 0x80) << code;
    EXPECT_EQ(f32_to_f8_e4m3(std::nextafter(midpoint, 0.0f)), code - 1) << code;
    EXPECT_EQ(f32_to_f8_e4m3(std::nextafter(midpoint, 1000.0f)), code) << code;
  }
  EXPECT_EQ(f32_to_f8_e4m3(1.0625f), 0x38);    // halfway between 1 (mantissa 0) and 1.125 (1): to 1
  EXPECT_EQ(f32_to_f8_e4m3(1.1875f), 0x3a);    // halfway between 1.125 (1) and 1.25 (2): to 1.25
  EXPECT_EQ(f32_to_f8_e4m3(0.0009765625f), 0x00);  // 2^-10, half the smallest subnormal: to zero
  EXPECT_EQ(f32_to_f8_e4m3(0.0029296875f), 0x02);  // 1.5 x 2^-9: to 2 x 2^-9
  EXPECT_EQ(f32_to_f8_e4m3(1e-30f), 0x00);
  EXPECT_EQ(f32_to_f8_e4m3(-0.0f), 0x80);
  EXPECT_EQ(f32_to_f8_e4m3(448.0f), 0x7e);
  EXPECT_EQ(f32_to_f8_e4m3(464.0f), 0x7e);  // would tie to 480, which e4m3fn spends on NaN
  EXPECT_EQ(f32_to_f8_e4m3(1e6f), 0x7e);
  EXPECT_EQ(f32_to_f8_e4m3(-1e6f), 0xfe);
  EXPECT_EQ(f32_to_f8_e4m3(std::numeric_limits<float>::infinity()), 0x7e);
  EXPECT_EQ(f32_to_f8_e4m3(-std::numeric_limits<float>::infinity()), 0xfe);
  EXPECT_EQ(f32_to_f8_e4m3(std::numeric_limits<float>::quiet_NaN()), 0x7f);
}

TEST(DtypeTest, E8m0IsAPowerOfTwoWithBias127) {
  EXPECT_EQ(f8_e8m0_to_f32(127), 1.0f);
  EXPECT_EQ(f8_e8m0_to_f32(128), 2.0f);
  EXPECT_EQ(f8_e8m0_to_f32(120), 1.0f / 128.0f);
  EXPECT_EQ(f8_e8m0_to_f32(0), std::ldexp(1.0f, -127));
  EXPECT_GT(f8_e8m0_to_f32(0), 0.0f);
  EXPECT_EQ(f8_e8m0_to_f32(254), std::ldexp(1.0f, 127));
  EXPECT_TRUE(std::isnan(f8_e8m0_to_f32(255)));
}

TEST(DtypeTest, Fp8TypesAreOneByteAndConvertElementwise) {
  EXPECT_EQ(dtype_size(DType::F8_E4M3), 1u);
  EXPECT_EQ(dtype_size(DType::F8_E8M0), 1u);
  EXPECT_EQ(dtype_name(DType::F8_E4M3), "F8_E4M3");
  EXPECT_EQ(dtype_name(DType::F8_E8M0), "F8_E8M0");
  const uint8_t codes[] = {0x38, 0xbc, 0x7e};
  float out[3];
  convert_to_f32(DType::F8_E4M3, codes, out, 3);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], -1.5f);
  EXPECT_EQ(out[2], 448.0f);
  convert_to_f32(DType::F8_E8M0, codes, out, 3);
  EXPECT_EQ(out[0], std::ldexp(1.0f, 0x38 - 127));
}

// OCP MX FP4 as gpt-oss's FP4_VALUES table lists it (gpt_oss/torch/weights.py): codes 0-7 positive, 8-15 negative.
TEST(DtypeTest, E2m1CodesAndPackedNibbles) {
  const float values[] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f,
                          -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
  for (uint8_t code = 0; code < 16; ++code) {
    EXPECT_EQ(f4_e2m1_to_f32(code), values[code]) << int(code);
    EXPECT_EQ(std::signbit(f4_e2m1_to_f32(code)), code >= 8) << int(code);
  }
  EXPECT_EQ(dtype_name(DType::F4_E2M1), "F4_E2M1");
  EXPECT_EQ(dtype_size(DType::U8), 1u);
  EXPECT_THROW(dtype_size(DType::F4_E2M1), Error);
  // I8: DeepSeek-V4's packed experts as safetensors stores them; as values, signed bytes.
  EXPECT_EQ(dtype_size(DType::I8), 1u);
  EXPECT_EQ(dtype_name(DType::I8), "I8");
  const uint8_t signed_bytes[] = {0x7f, 0x80, 0xff};
  float bytes_out[3];
  convert_to_f32(DType::I8, signed_bytes, bytes_out, 3);
  EXPECT_EQ(bytes_out[0], 127.0f);
  EXPECT_EQ(bytes_out[1], -128.0f);
  EXPECT_EQ(bytes_out[2], -1.0f);
  // Element 2j in the low nibble of byte j.
  const uint8_t packed[] = {0x72, 0x0f};
  float out[4];
  convert_to_f32(DType::F4_E2M1, packed, out, 4);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], 6.0f);
  EXPECT_EQ(out[2], -6.0f);
  EXPECT_EQ(out[3], 0.0f);
}

}  // namespace
}  // namespace tern
