#pragma once
// How a backend with FP8 kernels keeps a block-FP8 linear weight (DeepSeek-V3's format, docs/quantization.md): its
// e4m3 codes as the checkpoint stores them, [rows, columns], and one float32 scale per 128x128 block laid out as
// cuBLASLt's CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F takes a weight's scales: [ceil(rows / 128), scale_stride]
// row-major, scale_stride = ceil(columns / 128) rounded up to a multiple of 4, the padding zero.
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "core/tensor_info.h"

namespace tern {

struct BlockFp8Layout {
  static constexpr int64_t kBlock = 128;
  // Columns a multiple of this: 16-byte rows for the GEMV's loads and cuBLASLt's FP8 operands.
  static constexpr int64_t kColumnMultiple = 16;

  int64_t rows = 0;
  int64_t columns = 0;
  // MoE experts: the rows are `groups` experts' weights of rows / groups rows each, every one on a 128x128 grid of
  // its own (edge blocks partial, as an expert's checkpoint tensor has them), their scale rows one grid after the
  // other (kernels/moe/moe_experts.h). 1 for a linear layer's weight.
  int64_t groups = 1;
  int64_t scale_stride = 0;
  std::vector<float> scales;  // [scale_rows() * scale_stride]

  int64_t scale_rows() const { return groups * ((rows / groups + kBlock - 1) / kBlock); }
  static int64_t stride_for(int64_t columns) { return ((columns + kBlock - 1) / kBlock + 3) / 4 * 4; }
};

// The layout of the weight that `parts` make concatenated along rows, with every part's scales converted to float32
// (from F32, BF16, F16 or E8M0) and placed on the weight's grid; nullopt unless they fit one 128x128 grid: every part
// 2-D F8_E4M3 with 128x128 block scales and the same column count (a multiple of kColumnMultiple), each starting on
// a block boundary of its whole checkpoint tensor (a tensor-parallel shard may start inside one), and every part but
// the last a whole number of blocks tall (fused q/k/v of 128-row multiples fit; the 64-row heads of a tiny model do
// not). With `groups` > 1 the parts are that many experts' weights, each a run of parts.size() / groups consecutive
// parts (gate then up, say) with the same rows as the others: each run must fit a grid as above, and gets one of
// its own.
std::optional<BlockFp8Layout> block_fp8_layout(std::span<const TensorInfo* const> parts, int64_t groups = 1);

}  // namespace tern
