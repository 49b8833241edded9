// mxfp4_layout: which MXFP4 weights a backend can keep as codes (parts of whole 32-column groups), with their scale
// bytes gathered in row order; and the views Tensor gives of such a weight.
#include "backend/mxfp4_layout.h"

#include <gtest/gtest.h>

#include <deque>

#include "backend/tensor.h"
#include "core/error.h"

namespace tern {
namespace {

// MXFP4 parts whose scale bytes are 100 x part + 10 x row + group (of the whole tensor), so that a misplaced one
// shows.
class Parts {
 public:
  // A part of `shape` (its last dimension the columns), a view starting at (first_row, first_column) of a whole
  // tensor of whole_rows x whole_columns (the part's own by default).
  const TensorInfo* add(std::vector<int64_t> shape, DType scale_dtype = DType::U8, int64_t first_row = 0,
                        int64_t first_column = 0, int64_t whole_rows = -1, int64_t whole_columns = -1) {
    const int64_t part = static_cast<int64_t>(infos_.size());
    const int64_t columns = shape.back();
    int64_t rows = 1;
    for (size_t d = 0; d + 1 < shape.size(); ++d) rows *= shape[d];
    whole_rows = whole_rows < 0 ? rows : whole_rows;
    whole_columns = whole_columns < 0 ? columns : whole_columns;
    std::vector<std::byte>& scale_bytes = bytes_.emplace_back();
    for (int64_t r = 0; r < whole_rows; ++r) {
      for (int64_t g = 0; g < whole_columns / 32; ++g) scale_bytes.push_back(static_cast<std::byte>(100 * part + 10 * r + g));
    }
    TensorInfo& scales = scales_.emplace_back();
    scales.name = "w_scales";
    scales.dtype = scale_dtype;
    scales.shape = {whole_rows, whole_columns / 32};
    scales.data = scale_bytes.data();
    scales.size_bytes = scale_bytes.size();
    std::vector<std::byte>& codes = bytes_.emplace_back(static_cast<size_t>(rows * columns / 2), std::byte{0x21});
    TensorInfo& info = infos_.emplace_back();
    info.name = "w_blocks";
    info.dtype = DType::F4_E2M1;
    info.shape = std::move(shape);
    info.data = codes.data();
    info.size_bytes = codes.size();
    info.block_scales = BlockScales{&scales, 1, 32, first_row, first_column};
    pointers_.push_back(&info);
    return &info;
  }

  std::span<const TensorInfo* const> all() const { return pointers_; }

 private:
  std::deque<std::vector<std::byte>> bytes_;
  std::deque<TensorInfo> scales_, infos_;
  std::vector<const TensorInfo*> pointers_;
};

// Experts' gate and up rows one after another (DeepSeek-V4's per-expert FP4 weights), or gpt-oss's [E, out, in]:
// each part's scale bytes after the rows of the parts before it.
TEST(Mxfp4LayoutTest, ConcatenatedPartsKeepTheirRowsScales) {
  Parts parts;
  parts.add({2, 64});
  parts.add({1, 64}, DType::F8_E8M0);
  parts.add({2, 1, 64});
  const auto layout = mxfp4_layout(parts.all());
  ASSERT_TRUE(layout);
  EXPECT_EQ(layout->rows, 5);
  EXPECT_EQ(layout->columns, 64);
  EXPECT_EQ(layout->scale_columns(), 2);
  EXPECT_EQ(layout->scales, (std::vector<uint8_t>{0, 1, 10, 11, 100, 101, 200, 201, 210, 211}));
}

// A tensor-parallel shard's view takes the whole tensor's scales at its rows and groups.
TEST(Mxfp4LayoutTest, ShardViewsTakeTheWholeTensorsScales) {
  Parts parts;
  parts.add({2, 64}, DType::U8, 1, 32, 4, 128);
  const auto layout = mxfp4_layout(parts.all());
  ASSERT_TRUE(layout);
  EXPECT_EQ(layout->scales, (std::vector<uint8_t>{11, 12, 21, 22}));
}

TEST(Mxfp4LayoutTest, OtherWeightsAreNotKeptAsCodes) {
  {
    Parts parts;  // columns that are not whole groups
    parts.add({2, 48});
    EXPECT_FALSE(mxfp4_layout(parts.all()));
  }
  {
    Parts parts;  // a shard starting inside a group
    parts.add({2, 32}, DType::U8, 0, 16, 2, 64);
    EXPECT_FALSE(mxfp4_layout(parts.all()));
  }
  {
    Parts parts;  // parts of different widths
    parts.add({2, 64});
    parts.add({2, 32});
    EXPECT_FALSE(mxfp4_layout(parts.all()));
  }
  {
    Parts parts;  // scales of another format
    parts.add({2, 64}, DType::F32);
    EXPECT_FALSE(mxfp4_layout(parts.all()));
  }
  TensorInfo plain;  // unquantized
  plain.dtype = DType::BF16;
  plain.shape = {32, 32};
  const TensorInfo* part = &plain;
  EXPECT_FALSE(mxfp4_layout({&part, 1}));
}

// Codes are half a byte: an expert's rows start at its codes' bytes, with its rows of scale bytes.
TEST(Mxfp4LayoutTest, TensorViewsOfAnMxfp4WeightKeepTheirScales) {
  std::vector<uint8_t> codes(3 * 4 * 64 / 2);
  std::vector<uint8_t> scale_bytes(3 * 4 * 2);
  for (size_t i = 0; i < scale_bytes.size(); ++i) scale_bytes[i] = static_cast<uint8_t>(i);
  Tensor scales{DType::U8, {12, 2}, scale_bytes.data(), nullptr, nullptr};
  const Tensor flat{DType::F4_E2M1, {12, 64}, codes.data(), nullptr, std::make_shared<const Tensor>(scales)};
  EXPECT_EQ(flat.bytes(), codes.size());
  const Tensor experts = flat.reshape({3, 4, 64});
  const Tensor last = experts.rows(2, 1);
  EXPECT_EQ(last.data, codes.data() + 2 * 4 * 32);
  EXPECT_EQ(last.bytes(), 4u * 32u);
  ASSERT_TRUE(last.block_scales);
  EXPECT_EQ(last.block_scales->shape, (std::vector<int64_t>{4, 2}));
  EXPECT_EQ(last.block_scales->ptr<uint8_t>()[0], 16);
  EXPECT_EQ(flat.rows(5, 1).block_scales->ptr<uint8_t>()[1], 11);  // any row: one row of scales each
  EXPECT_THROW(flat.reshape({24, 32}), Error);  // its groups are along the columns it has
}

}  // namespace
}  // namespace tern
