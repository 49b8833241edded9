// block_fp8_layout: which block-FP8 weights a backend can keep as codes (parts on one 128x128 grid), and their scales
// converted to float32 and placed in cuBLASLt's layout; and the views Tensor gives of such a weight.
#include "backend/block_fp8_layout.h"

#include <gtest/gtest.h>

#include <deque>

#include "backend/tensor.h"
#include "core/error.h"

namespace tern {
namespace {

// Block-FP8 parts whose scales are stored as `scale_dtype`; each scale's value is 100 x part + 10 x block row +
// block column (of the whole tensor), so that a misplaced one shows.
class Parts {
 public:
  // A part of `rows` x `columns` codes, a view starting at (first_row, first_column) of a whole tensor of
  // whole_rows x whole_columns.
  const TensorInfo* add(int64_t rows, int64_t columns, DType scale_dtype = DType::F32, int64_t first_row = 0,
                        int64_t first_column = 0, int64_t whole_rows = -1, int64_t whole_columns = -1) {
    const int64_t part = static_cast<int64_t>(infos_.size());
    whole_rows = whole_rows < 0 ? rows : whole_rows;
    whole_columns = whole_columns < 0 ? columns : whole_columns;
    const int64_t scale_rows = (whole_rows + 127) / 128, scale_columns = (whole_columns + 127) / 128;
    std::vector<std::byte>& scale_bytes = bytes_.emplace_back();
    for (int64_t r = 0; r < scale_rows; ++r) {
      for (int64_t c = 0; c < scale_columns; ++c) {
        append_scale(static_cast<float>(100 * part + 10 * r + c), scale_dtype, scale_bytes);
      }
    }
    TensorInfo& scales = scales_.emplace_back();
    scales.name = "w.weight_scale_inv";
    scales.dtype = scale_dtype;
    scales.shape = {scale_rows, scale_columns};
    scales.data = scale_bytes.data();
    scales.size_bytes = scale_bytes.size();
    std::vector<std::byte>& codes = bytes_.emplace_back(static_cast<size_t>(rows * columns), std::byte{0x38});
    TensorInfo& info = infos_.emplace_back();
    info.name = "w.weight";
    info.dtype = DType::F8_E4M3;
    info.shape = {rows, columns};
    info.data = codes.data();
    info.size_bytes = codes.size();
    info.block_scales = BlockScales{&scales, 128, 128, first_row, first_column};
    pointers_.push_back(&info);
    return &info;
  }

  std::span<const TensorInfo* const> all() const { return pointers_; }

 private:
  static void append_scale(float value, DType dtype, std::vector<std::byte>& out) {
    if (dtype == DType::BF16) {
      const uint16_t bits = f32_to_bf16(value);
      out.insert(out.end(), reinterpret_cast<const std::byte*>(&bits), reinterpret_cast<const std::byte*>(&bits) + 2);
    } else if (dtype == DType::F8_E8M0) {  // the nearest power of two's exponent
      out.push_back(static_cast<std::byte>(127 + static_cast<int>(std::round(std::log2(std::max(value, 1.0f))))));
    } else {
      out.insert(out.end(), reinterpret_cast<const std::byte*>(&value), reinterpret_cast<const std::byte*>(&value) + 4);
    }
  }

  std::deque<std::vector<std::byte>> bytes_;
  std::deque<TensorInfo> scales_, infos_;
  std::vector<const TensorInfo*> pointers_;
};

TEST(BlockFp8LayoutTest, OnePartWithPartialEdgeBlocks) {
  Parts parts;
  parts.add(300, 272);  // 3 x 3 blocks, the last of each partial
  const auto layout = block_fp8_layout(parts.all());
  ASSERT_TRUE(layout);
  EXPECT_EQ(layout->rows, 300);
  EXPECT_EQ(layout->columns, 272);
  EXPECT_EQ(layout->scale_rows(), 3);
  EXPECT_EQ(layout->scale_stride, 4);  // 3 column blocks, rounded up to 4
  const std::vector<float> expected = {0, 1, 2, 0, 10, 11, 12, 0, 20, 21, 22, 0};
  EXPECT_EQ(layout->scales, expected);
}

// Fused q/k/v of 128-row multiples: each part's scales after the rows of the parts before it.
TEST(BlockFp8LayoutTest, ConcatenatedPartsOnOneGrid) {
  Parts parts;
  parts.add(256, 640);
  parts.add(128, 640, DType::BF16);
  parts.add(100, 640);
  const auto layout = block_fp8_layout(parts.all());
  ASSERT_TRUE(layout);
  EXPECT_EQ(layout->rows, 484);
  EXPECT_EQ(layout->scale_stride, 8);
  ASSERT_EQ(layout->scale_rows(), 4);
  const auto row = [&](int64_t r) {
    return std::vector<float>(layout->scales.begin() + r * 8, layout->scales.begin() + r * 8 + 8);
  };
  EXPECT_EQ(row(0), (std::vector<float>{0, 1, 2, 3, 4, 0, 0, 0}));
  EXPECT_EQ(row(1), (std::vector<float>{10, 11, 12, 13, 14, 0, 0, 0}));
  EXPECT_EQ(row(2), (std::vector<float>{100, 101, 102, 103, 104, 0, 0, 0}));
  EXPECT_EQ(row(3), (std::vector<float>{200, 201, 202, 203, 204, 0, 0, 0}));
}

// A tensor-parallel shard's view: rows and columns from a block boundary of the whole tensor take the whole
// tensor's scales there; E8M0 scales become their powers of two.
TEST(BlockFp8LayoutTest, ShardViewsAndE8m0Scales) {
  Parts parts;
  parts.add(128, 256, DType::F32, 256, 128, 512, 512);
  const auto layout = block_fp8_layout(parts.all());
  ASSERT_TRUE(layout);
  EXPECT_EQ(layout->scales, (std::vector<float>{21, 22, 0, 0}));
  Parts powers;
  powers.add(128, 128, DType::F8_E8M0, 128, 0, 256, 128);  // the whole tensor's scale (1, 0) is 10: 2^3
  const auto from_e8m0 = block_fp8_layout(powers.all());
  ASSERT_TRUE(from_e8m0);
  EXPECT_EQ(from_e8m0->scales, (std::vector<float>{8, 0, 0, 0}));
}

// MoE experts whose rows are not whole blocks (gpt-oss's 2,880): each expert's parts on a grid of their own, the
// grids' scale rows one after the other.
TEST(BlockFp8LayoutTest, ExpertsOnGridsOfTheirOwn) {
  Parts parts;
  for (int expert = 0; expert < 3; ++expert) {
    parts.add(128, 256);  // gate: whole blocks
    parts.add(64, 256);   // up: ends the expert on a partial block
  }
  EXPECT_FALSE(block_fp8_layout(parts.all())) << "one grid: the second part ends inside a block";
  const auto layout = block_fp8_layout(parts.all(), 3);
  ASSERT_TRUE(layout);
  EXPECT_EQ(layout->rows, 3 * 192);
  EXPECT_EQ(layout->groups, 3);
  ASSERT_EQ(layout->scale_rows(), 6);  // two block rows an expert
  const auto row = [&](int64_t r) {
    return std::vector<float>(layout->scales.begin() + r * 4, layout->scales.begin() + r * 4 + 2);
  };
  for (int expert = 0; expert < 3; ++expert) {
    EXPECT_EQ(row(2 * expert), (std::vector<float>{200.0f * expert, 200.0f * expert + 1})) << expert;
    EXPECT_EQ(row(2 * expert + 1), (std::vector<float>{200.0f * expert + 100, 200.0f * expert + 101})) << expert;
  }
}

TEST(BlockFp8LayoutTest, ExpertsOffTheirGridsAreNotKeptAsCodes) {
  {
    Parts parts;  // an expert's first part ends inside a block
    for (int expert = 0; expert < 2; ++expert) {
      parts.add(64, 256);
      parts.add(64, 256);
    }
    EXPECT_FALSE(block_fp8_layout(parts.all(), 2));
  }
  {
    Parts parts;  // experts of different rows
    parts.add(128, 256);
    parts.add(64, 256);
    EXPECT_FALSE(block_fp8_layout(parts.all(), 2));
  }
  Parts parts;  // parts that do not split into the experts
  parts.add(128, 256);
  parts.add(128, 256);
  parts.add(128, 256);
  EXPECT_FALSE(block_fp8_layout(parts.all(), 2));
}

TEST(BlockFp8LayoutTest, PartsOffTheGridAreNotKeptAsCodes) {
  {
    Parts parts;  // a tiny model's 64-row q then k: k's rows would start inside a block
    parts.add(64, 256);
    parts.add(64, 256);
    EXPECT_FALSE(block_fp8_layout(parts.all()));
  }
  {
    Parts parts;  // a shard starting inside a block of the whole tensor
    parts.add(64, 256, DType::F32, 64, 0, 128, 256);
    EXPECT_FALSE(block_fp8_layout(parts.all()));
  }
  {
    Parts parts;  // columns that are not 16-byte rows
    parts.add(128, 200);
    EXPECT_FALSE(block_fp8_layout(parts.all()));
  }
  {
    Parts parts;  // parts of different widths
    parts.add(128, 256);
    parts.add(128, 384);
    EXPECT_FALSE(block_fp8_layout(parts.all()));
  }
  TensorInfo plain;  // unquantized
  plain.dtype = DType::BF16;
  plain.shape = {128, 128};
  const TensorInfo* part = &plain;
  EXPECT_FALSE(block_fp8_layout({&part, 1}));
}

TEST(BlockFp8LayoutTest, TensorViewsOfABlockFp8WeightKeepTheirScales) {
  std::vector<uint8_t> codes(300 * 32);
  std::vector<float> scale_values = {1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0};
  Tensor scales{DType::F32, {3, 4}, scale_values.data(), nullptr, nullptr};
  Tensor weight{DType::F8_E4M3, {300, 32}, codes.data(), nullptr, std::make_shared<const Tensor>(scales)};
  const Tensor tail = weight.rows(128, 172);
  EXPECT_EQ(tail.data, codes.data() + 128 * 32);
  ASSERT_TRUE(tail.block_scales);
  EXPECT_EQ(tail.block_scales->shape, (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(tail.block_scales->ptr<float>()[0], 2.0f);
  EXPECT_EQ(weight.rows(256, 10).block_scales->shape, (std::vector<int64_t>{1, 4}));
  EXPECT_THROW(weight.rows(100, 10), Error);
  EXPECT_NO_THROW(weight.reshape({300, 32}));
  EXPECT_THROW(weight.reshape({600, 16}), Error);
  EXPECT_THROW(weight.reshape({3, 100, 32}), Error);  // experts inside a block
  // Experts [E, N, K] of whole blocks: expert e's scales are rows e * N / 128 on.
  std::vector<uint8_t> expert_codes(3 * 256 * 32);
  std::vector<float> expert_scale_values(6 * 4);
  for (size_t i = 0; i < expert_scale_values.size(); ++i) expert_scale_values[i] = static_cast<float>(i);
  Tensor expert_scales{DType::F32, {6, 4}, expert_scale_values.data(), nullptr, nullptr};
  Tensor flat{DType::F8_E4M3, {768, 32}, expert_codes.data(), nullptr, std::make_shared<const Tensor>(expert_scales)};
  const Tensor experts = flat.reshape({3, 256, 32});
  const Tensor last = experts.rows(2, 1);
  EXPECT_EQ(last.data, expert_codes.data() + 2 * 256 * 32);
  EXPECT_EQ(last.block_scales->shape, (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(last.block_scales->ptr<float>()[0], 16.0f);
}

// Experts on grids of their own (Backend::load_expert_weight), scales [E, ceil(N / 128), stride]: [E, N, K] of any
// N, rows taken by expert.
TEST(BlockFp8LayoutTest, TensorViewsOfExpertsOnGridsOfTheirOwn) {
  std::vector<uint8_t> codes(3 * 192 * 32);
  std::vector<float> scale_values(3 * 2 * 4);
  for (size_t i = 0; i < scale_values.size(); ++i) scale_values[i] = static_cast<float>(i);
  Tensor scales{DType::F32, {3, 2, 4}, scale_values.data(), nullptr, nullptr};
  Tensor flat{DType::F8_E4M3, {576, 32}, codes.data(), nullptr, std::make_shared<const Tensor>(scales)};
  ASSERT_TRUE(flat.experts_own_grids());
  EXPECT_THROW(flat.reshape({4, 144, 32}), Error) << "3 experts' grids";
  EXPECT_THROW(flat.reshape({6, 96, 32}), Error) << "3 experts' grids";
  EXPECT_THROW(flat.rows(0, 128), Error) << "rows are taken by expert";
  const Tensor experts = flat.reshape({3, 192, 32});
  const Tensor last = experts.rows(2, 1);
  EXPECT_EQ(last.data, codes.data() + 2 * 192 * 32);
  EXPECT_EQ(last.block_scales->shape, (std::vector<int64_t>{1, 2, 4}));
  EXPECT_EQ(last.block_scales->ptr<float>()[0], 16.0f);
}

}  // namespace
}  // namespace tern
