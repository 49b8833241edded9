// Online FP8's quantizer against blocks computed by hand: per block, scale = max |x| / 448 and codes the e4m3 values
// nearest x / scale (ties to even); partial edge blocks, a block of zeros, values above 448 and negative values.
#include "model/block_fp8_weight.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/error.h"

namespace tern {
namespace {

TensorInfo f32_tensor(const std::string& name, std::vector<int64_t> shape, const std::vector<float>& values) {
  TensorInfo info;
  info.name = name;
  info.file = "model.safetensors";
  info.dtype = DType::F32;
  info.shape = std::move(shape);
  info.data = reinterpret_cast<const std::byte*>(values.data());
  info.size_bytes = values.size() * sizeof(float);
  return info;
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
  EXPECT_NE(error_of(ints).find("tensor 'ids' is I32; FP8 quantization takes BF16, F16 or F32 weights"),
            std::string::npos);
}

}  // namespace
}  // namespace tern
