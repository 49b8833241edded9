#include "backend/tensor.h"

#include <algorithm>

#include "backend/block_fp8_layout.h"
#include "core/error.h"
#include "core/tensor_info.h"

namespace tern {

Tensor Tensor::reshape(std::vector<int64_t> new_shape) const {
  Tensor out = *this;
  out.shape = std::move(new_shape);
  if (out.numel() != numel()) fail("reshape: {} elements cannot take a shape of {}", numel(), out.numel());
  if (block_scales) {  // its rows keep their columns and whole 128-row blocks: [rows, K] or experts' [E, N, K]
    const bool keeps_blocks =
        (out.shape.size() == 2 || (out.shape.size() == 3 && out.shape[1] % BlockFp8Layout::kBlock == 0)) &&
        out.shape.back() == shape.back();
    if (!keeps_blocks) {
      fail("reshape: a block-FP8 weight of shape {} cannot take shape {} (its scales are of 128x128 blocks)",
           shape_string(shape), shape_string(out.shape));
    }
  }
  return out;
}

Tensor Tensor::rows(int64_t begin, int64_t count) const {
  if (shape.empty() || begin < 0 || count < 0 || begin + count > shape[0]) {
    fail("rows: range [{}, {}) outside dimension 0 of size {}", begin, begin + count, shape.empty() ? 0 : shape[0]);
  }
  Tensor out = *this;
  out.shape[0] = count;
  out.data = static_cast<char*>(data) + static_cast<size_t>(begin * row_numel()) * dtype_size(dtype);
  if (block_scales) {  // rows of [rows, K], or experts of [E, N, K]
    constexpr int64_t block = BlockFp8Layout::kBlock;
    const int64_t weight_rows = row_numel() / shape.back();
    const int64_t first = begin * weight_rows;
    if (first % block != 0) fail("rows: a block-FP8 weight's rows are taken from a block's first row, not {}", first);
    const int64_t scale_rows =
        std::min(block_scales->size(0) - first / block, (count * weight_rows + block - 1) / block);
    out.block_scales = std::make_shared<const Tensor>(block_scales->rows(first / block, scale_rows));
  }
  return out;
}

}  // namespace tern
