// Online FP8's quantizer against blocks computed by hand: per block, scale = max |x| / 448 and codes the e4m3 values
// nearest x / scale (ties to even); partial edge blocks, a block of zeros, values above 448 and negative values. An
// FP4 weight's repacking (power-of-two scales) against its exact values.
#include "model/block_fp8_weight.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/error.h"

namespace tern {
namespace {

// A tensor of model.safetensors over `bytes` bytes at `data`.
TensorInfo host_tensor(const std::string& name, DType dtype, std::vector<int64_t> shape, const void* data,
                       size_t bytes) {
  TensorInfo info;
  info.name = name;
  info.file = "model.safetensors";
  info.dtype = dtype;
  info.shape = std::move(shape);
  info.data = static_cast<const std::byte*>(data);
  info.size_bytes = bytes;
  return info;
}

TensorInfo f32_tensor(const std::string& name, std::vector<int64_t> shape, const std::vector<float>& values) {
  return host_tensor(name, DType::F32, std::move(shape), values.data(), values.size() * sizeof(float));
}

std::vector<uint8_t> codes(const TensorInfo& info) {
  const auto* bytes = reinterpret_cast<const uint8_t*>(info.data);
  return {bytes, bytes + info.size_bytes};
}

std::vector<float> scales(const TensorInfo& info) {
  const TensorInfo& scale = *info.block_scales->scales;
  const auto* values = reinterpret_cast<const float*>(scale.data);
  return {values, values + scale.numel()};
}

std::string error_of(const TensorInfo& info) {
  try {
    BlockFp8Weight quantized(info);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// A 3x5 weight in 2x2 blocks: a [2, 3] grid whose last row and column of blocks are partial.
TEST(BlockFp8WeightTest, HandComputedBlocks) {
  const std::vector<float> values = {
      7.0f,    -3.0f,  0.0f,  0.0f,     896.0f,  //
      1.0625f, 1.1f,   0.0f,  0.0f,     -448.0f,  //
      -0.001f, 0.0f,   0.25f, -0.0625f, 1000.0f,
  };
  const BlockFp8Weight quantized(f32_tensor("w", {3, 5}, values), 2, 2);
  const TensorInfo& info = quantized.info();
  EXPECT_EQ(info.name, "w");
  EXPECT_EQ(info.dtype, DType::F8_E4M3);
  EXPECT_EQ(info.shape, (std::vector<int64_t>{3, 5}));
  ASSERT_TRUE(info.block_scales);
  EXPECT_EQ(info.block_scales->block_rows, 2);
  EXPECT_EQ(info.block_scales->block_columns, 2);
  EXPECT_EQ(info.block_scales->scales->name, "w_scale_inv");
  EXPECT_EQ(info.block_scales->scales->dtype, DType::F32);
  EXPECT_EQ(info.block_scales->scales->shape, (std::vector<int64_t>{2, 3}));
  // amax 7: 2^-6. Zeros: 1. 896 (above 448): 2. -0.001: its own / 448. 0.25: / 448. 1000: / 448.
  EXPECT_EQ(scales(info), (std::vector<float>{0.015625f, 1.0f, 2.0f, 0.001f / 448.0f, 0.25f / 448.0f,
                                              1000.0f / 448.0f}));
  // 7 / 2^-6 = 448: 0x7e. -3: -192 = -1.5 x 2^7: 0xf4. 1.0625: 68, halfway between 64 and 72: the even 64 (0x68).
  // 1.1: 70.4, nearer 72 (0x69). 896 / 2 = 448, -448 / 2 = -224 = -1.75 x 2^7: 0xf6. -0.001 is its block's amax:
  // -448. 0.25: 448; -0.0625: -112 = -1.75 x 2^6 (0xee). 1000 / (1000 / 448) is 448 within float rounding: 0x7e.
  EXPECT_EQ(codes(info), (std::vector<uint8_t>{0x7e, 0xf4, 0x00, 0x00, 0x7e,  //
                                               0x68, 0x69, 0x00, 0x00, 0xf6,  //
                                               0xfe, 0x00, 0x7e, 0xee, 0x7e}));
  // What the backends compute from it: code x its block's scale.
  std::vector<float> dequantized(values.size());
  dequantize_to_f32(info, dequantized.data());
  EXPECT_EQ(dequantized[0], 7.0f);
  EXPECT_EQ(dequantized[1], -3.0f);
  EXPECT_EQ(dequantized[5], 1.0f);
  EXPECT_EQ(dequantized[6], 1.125f);
  EXPECT_EQ(dequantized[4], 896.0f);
  EXPECT_EQ(dequantized[9], -448.0f);
  EXPECT_EQ(dequantized[2], 0.0f);
  EXPECT_NEAR(dequantized[14], 1000.0f, 1e-3f);
  EXPECT_NEAR(dequantized[10], -0.001f, 1e-9f);
}

// The default 128x128 blocks over 130 rows and 3 columns: a [2, 1] grid, the second block two rows deep, each
// block scaled by its own amax only (as DeepSeek's kv_a_proj_with_mqa, 576 rows, has a partial last block).
TEST(BlockFp8WeightTest, PartialEdgeBlocksOfTheDefaultSize) {
  std::vector<uint16_t> values(130 * 3, f32_to_bf16(0.5f));
  values[5] = f32_to_bf16(-56.0f);          // row 1: the first block's amax
  values[129 * 3 + 2] = f32_to_bf16(3.5f);  // row 129: the second block's
  TensorInfo weight;
  weight.name = "model.layers.0.self_attn.kv_a_proj_with_mqa.weight";
  weight.dtype = DType::BF16;
  weight.shape = {130, 3};
  weight.data = reinterpret_cast<const std::byte*>(values.data());
  weight.size_bytes = values.size() * sizeof(uint16_t);
  const BlockFp8Weight quantized(weight);
  const TensorInfo& info = quantized.info();
  EXPECT_EQ(info.block_scales->block_rows, 128);
  EXPECT_EQ(info.block_scales->block_columns, 128);
  EXPECT_EQ(info.block_scales->scales->shape, (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(scales(info), (std::vector<float>{0.125f, 0.0078125f}));  // 56 / 448, 3.5 / 448
  const auto c = codes(info);
  EXPECT_EQ(c[0], 0x48);  // 0.5 / 0.125 = 4 = 2^2: biased exponent 9
  EXPECT_EQ(c[5], 0xfe);  // -448
  EXPECT_EQ(c[128 * 3], 0x68);  // 0.5 / 2^-7 = 64 = 2^6: biased exponent 13
  EXPECT_EQ(c[129 * 3 + 2], 0x7e);  // 448
  std::vector<float> dequantized(values.size());
  dequantize_to_f32(info, dequantized.data());
  for (size_t i = 0; i < values.size(); ++i) EXPECT_EQ(dequantized[i], bf16_to_f32(values[i])) << i;
}

TEST(BlockFp8WeightTest, RefusesWhatItCannotQuantize) {
  const std::vector<float> values = {1.0f, std::numeric_limits<float>::quiet_NaN(), 2.0f, 3.0f};
  EXPECT_NE(error_of(f32_tensor("bias", {4}, values)).find("model.safetensors: tensor 'bias' has shape [4]; FP8 "
                                                             "quantization takes 2-D [out, in] weights"),
            std::string::npos);
  EXPECT_NE(error_of(f32_tensor("w", {2, 2}, values)).find("model.safetensors: tensor 'w' holds nan at [0, 1]; FP8 "
                                                             "quantization needs finite weights"),
            std::string::npos)
      << error_of(f32_tensor("w", {2, 2}, values));
  TensorInfo ints = f32_tensor("ids", {2, 2}, values);
  ints.dtype = DType::I32;
  EXPECT_NE(error_of(ints).find("tensor 'ids' is I32; FP8 quantization takes BF16, F16 or F32 weights, or FP4 ones "
                                 "with their scales"),
            std::string::npos);
}

// An FP4 weight [rows, 256] whose group g of 32 inputs in row r has scale 2^(exponent(r, g) - 127); its codes run
// through all 16 e2m1 codes.
struct Fp4Weight {
  std::vector<uint8_t> packed, exponents;
  TensorInfo scales, weight;

  Fp4Weight(int64_t rows, uint8_t (*exponent)(int64_t row, int64_t group)) {
    const int64_t columns = 256, groups = columns / 32;
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t g = 0; g < groups; ++g) exponents.push_back(exponent(r, g));
      for (int64_t c = 0; c < columns; c += 2) {
        packed.push_back(static_cast<uint8_t>(((r + c) % 16) | ((r + c + 1) % 16) << 4));
      }
    }
    scales = host_tensor("w.scale", DType::F8_E8M0, {rows, groups}, exponents.data(), exponents.size());
    weight = host_tensor("w", DType::F4_E2M1, {rows, columns}, packed.data(), packed.size());
    weight.block_scales = BlockScales{&scales, 1, 32, 0, 0};
  }
};

// A quantized weight's values, each code times its block's scale.
std::vector<float> dequantized(const TensorInfo& weight) {
  std::vector<float> out(static_cast<size_t>(weight.numel()));
  dequantize_to_f32(weight, out.data());
  return out;
}

// Group scales spanning 2^14 within each 128 x 128 block (2^-10 .. 2^4, and a block of 2^20 .. 2^34): every value
// is an e4m3 code times the block's power-of-two scale, exactly; the block's largest value (6 x its largest group
// scale) lands in (224, 448].
TEST(BlockFp8WeightTest, RepacksFp4WithinTwoToTheFourteenExactly) {
  const Fp4Weight fp4(256, [](int64_t row, int64_t group) {
    return static_cast<uint8_t>((row < 128 ? 117 : 147) + (row + 3 * group) % 15);
  });
  const BlockFp8Weight fp8(fp4.weight);
  EXPECT_EQ(fp8.info().dtype, DType::F8_E4M3);
  EXPECT_EQ(dequantized(fp8.info()), dequantized(fp4.weight));
  for (const float scale : scales(fp8.info())) {
    int exponent = 0;
    EXPECT_EQ(std::frexp(scale, &exponent), 0.5f) << scale << " is not a power of two";
  }
  const auto [first, second] = std::pair{scales(fp8.info())[0], scales(fp8.info())[2]};
  EXPECT_EQ(first, std::ldexp(1.0f, 4 - 6));  // 6 x 2^4 = 96 over 2^-2: 384
  EXPECT_EQ(second, std::ldexp(1.0f, 34 - 6));
}

// Past 2^14 the smallest values are no e4m3 code times the scale: each becomes the nearest one.
TEST(BlockFp8WeightTest, RepacksFp4PastTwoToTheFourteenToTheNearestCode) {
  const Fp4Weight fp4(128, [](int64_t, int64_t group) { return static_cast<uint8_t>(group == 0 ? 107 : 127); });
  const BlockFp8Weight fp8(fp4.weight);
  const std::vector<float> exact = dequantized(fp4.weight), repacked = dequantized(fp8.info());
  const float scale = scales(fp8.info())[0];
  int inexact = 0;
  for (size_t i = 0; i < exact.size(); ++i) {
    EXPECT_EQ(repacked[i], f8_e4m3_to_f32(f32_to_f8_e4m3(exact[i] / scale)) * scale) << i;
    inexact += repacked[i] != exact[i];
  }
  EXPECT_GT(inexact, 0);
}

}  // namespace
}  // namespace tern
