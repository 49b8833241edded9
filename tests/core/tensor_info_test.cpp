// dequantize_to_f32: every element of a block-quantized weight times the scale of its own block, with partial edge
// blocks, views that start inside the block grid (tensor-parallel shards), and each scale dtype.
#include <gtest/gtest.h>

#include <cstring>

#include "core/tensor_info.h"

namespace tern {
namespace {

constexpr int64_t kRows = 300, kColumns = 200;  // 3 x 2 blocks of 128, the last of each partial

// Every code but the two NaNs, spread over the weight.
std::vector<uint8_t> codes() {
  std::vector<uint8_t> out(kRows * kColumns);
  for (size_t i = 0; i < out.size(); ++i) {
    const auto code = static_cast<uint8_t>(i * 37 + 11);
    out[i] = (code & 0x7f) == 0x7f ? 0x38 : code;
  }
  return out;
}

TensorInfo weight_info(const std::vector<uint8_t>& codes, const TensorInfo& scales) {
  TensorInfo info;
  info.name = "w";
  info.dtype = DType::F8_E4M3;
  info.shape = {kRows, kColumns};
  info.data = reinterpret_cast<const std::byte*>(codes.data());
  info.size_bytes = codes.size();
  info.block_scales = BlockScales{&scales, 128, 128, 0, 0};
  return info;
}

// The definition: element (r, c) of the whole weight is e4m3(code) x scale[r / 128][c / 128].
float expected(const std::vector<uint8_t>& codes, const std::vector<float>& scale, int64_t r, int64_t c) {
  return f8_e4m3_to_f32(codes[r * kColumns + c]) * scale[(r / 128) * 2 + c / 128];
}

TEST(TensorInfoTest, DequantizesEachElementWithItsBlocksF32Scale) {
  const auto q = codes();
  const std::vector<float> scale = {0.5f, 0.001f, 3.0f, 1e-4f, 7.25f, 0.03125f};
  TensorInfo scales{"s", {}, DType::F32, {3, 2}, reinterpret_cast<const std::byte*>(scale.data()), 24, {}};
  std::vector<float> out(kRows * kColumns);
  dequantize_to_f32(weight_info(q, scales), out.data());
  for (int64_t r = 0; r < kRows; ++r) {
    for (int64_t c = 0; c < kColumns; ++c) ASSERT_EQ(out[r * kColumns + c], expected(q, scale, r, c)) << r << "," << c;
  }
}

TEST(TensorInfoTest, AViewStartingInsideTheGridUsesTheWholeWeightsBlocks) {
  const auto q = codes();
  const std::vector<float> scale = {0.5f, 0.25f, 3.0f, 1.5f, 7.0f, 0.125f};
  TensorInfo scales{"s", {}, DType::F32, {3, 2}, reinterpret_cast<const std::byte*>(scale.data()), 24, {}};
  // Rows [100, 300) and columns [100, 200), as a row shard and a column shard see them.
  std::vector<uint8_t> shard;
  for (int64_t r = 100; r < kRows; ++r) shard.insert(shard.end(), q.begin() + r * kColumns + 100, q.begin() + (r + 1) * kColumns);
  TensorInfo view = weight_info(q, scales);
  view.shape = {200, 100};
  view.data = reinterpret_cast<const std::byte*>(shard.data());
  view.size_bytes = shard.size();
  view.block_scales->first_row = 100;
  view.block_scales->first_column = 100;
  std::vector<float> out(200 * 100);
  dequantize_to_f32(view, out.data());
  for (int64_t r = 0; r < 200; ++r) {
    for (int64_t c = 0; c < 100; ++c) ASSERT_EQ(out[r * 100 + c], expected(q, scale, r + 100, c + 100)) << r << "," << c;
  }
}

TEST(TensorInfoTest, Bf16F16AndE8m0ScalesDecodeBeforeTheProduct) {
  const auto q = codes();
  // 0.375 in each dtype, then powers of two: exact in all three.
  const std::vector<uint16_t> bf16 = {0x3ec0, 0x3f80, 0x4000, 0x3f00, 0x3e80, 0x4080};
  const std::vector<uint16_t> f16 = {0x3600, 0x3c00, 0x4000, 0x3800, 0x3400, 0x4400};
  const std::vector<uint8_t> e8m0 = {0x7f, 0x7f, 0x80, 0x7e, 0x7d, 0x81};
  const std::vector<float> bf16_values = {0.375f, 1.0f, 2.0f, 0.5f, 0.25f, 4.0f};
  const std::vector<float> e8m0_values = {1.0f, 1.0f, 2.0f, 0.5f, 0.25f, 4.0f};
  const auto check = [&](DType dtype, const void* data, size_t bytes, const std::vector<float>& values) {
    TensorInfo scales{"s", {}, dtype, {3, 2}, static_cast<const std::byte*>(data), bytes, {}};
    std::vector<float> out(kRows * kColumns);
    dequantize_to_f32(weight_info(q, scales), out.data());
    for (int64_t r = 0; r < kRows; r += 7) {
      for (int64_t c = 0; c < kColumns; c += 3) {
        ASSERT_EQ(out[r * kColumns + c], expected(q, values, r, c)) << dtype_name(dtype) << " " << r << "," << c;
      }
    }
  };
  check(DType::BF16, bf16.data(), 12, bf16_values);
  check(DType::F16, f16.data(), 12, bf16_values);
  check(DType::F8_E8M0, e8m0.data(), 6, e8m0_values);
}

TEST(TensorInfoTest, APlainTensorIsConvertedOnly) {
  const std::vector<uint16_t> bf16 = {0x3f80, 0xc000};
  TensorInfo info{"b", {}, DType::BF16, {2}, reinterpret_cast<const std::byte*>(bf16.data()), 4, {}};
  float out[2];
  dequantize_to_f32(info, out);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], -2.0f);
}

}  // namespace
}  // namespace tern
