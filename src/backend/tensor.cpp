#include "backend/tensor.h"

#include <algorithm>

#include "backend/block_fp8_layout.h"
#include "backend/mxfp4_layout.h"
#include "core/error.h"
#include "core/tensor_info.h"

namespace tern {

Tensor Tensor::reshape(std::vector<int64_t> new_shape) const {
  Tensor out = *this;
  out.shape = std::move(new_shape);
  if (out.numel() != numel()) fail("reshape: {} elements cannot take a shape of {}", numel(), out.numel());
  if (block_scales) {  // its rows keep their columns and whole blocks of rows: [rows, K] or experts' [E, N, K]
    const int64_t block = scale_block_rows();
    const bool keeps_blocks =
        out.shape.back() == shape.back() &&
        (experts_own_grids()
             ? out.shape.size() == 2 || (out.shape.size() == 3 && out.shape[0] == block_scales->size(0) &&
                                         (out.shape[1] + block - 1) / block == block_scales->size(1))
             : out.shape.size() == 2 || (out.shape.size() == 3 && out.shape[1] % block == 0));
    if (!keeps_blocks) {
      fail("reshape: a block-quantized weight of shape {} cannot take shape {} (its scales are of {}x{} blocks)",
           shape_string(shape), shape_string(out.shape), block,
           dtype == DType::F4_E2M1 ? Mxfp4Layout::kGroup : BlockFp8Layout::kBlock);
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
  out.data = static_cast<char*>(data) + dtype_bytes(dtype, begin * row_numel());
  if (experts_own_grids()) {  // experts of [E, N, K], each with its grid
    if (shape.size() != 3) fail("rows: experts' block-FP8 weights are taken by expert, from shape [E, N, K]");
    out.block_scales = std::make_shared<const Tensor>(block_scales->rows(begin, count));
  } else if (block_scales) {  // rows of [rows, K], or experts of [E, N, K]
    const int64_t block = scale_block_rows();
    const int64_t weight_rows = row_numel() / shape.back();
    const int64_t first = begin * weight_rows;
    if (first % block != 0) fail("rows: a block-FP8 weight's rows are taken from a block's first row, not {}", first);
    const int64_t scale_rows =
        std::min(block_scales->size(0) - first / block, (count * weight_rows + block - 1) / block);
    out.block_scales = std::make_shared<const Tensor>(block_scales->rows(first / block, scale_rows));
  }
  return out;
}

bool Tensor::experts_own_grids() const { return block_scales && block_scales->shape.size() == 3; }

int64_t Tensor::scale_block_rows() const { return dtype == DType::F4_E2M1 ? 1 : BlockFp8Layout::kBlock; }

}  // namespace tern
