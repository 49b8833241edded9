#pragma once
// A read-only view of a tensor in host memory, such as a checkpoint tensor in a memory-mapped file.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace tern {

struct TensorInfo;

// The scales of a block-quantized weight: element (r, c) of the whole weight, its leading dimensions flattened into
// rows, is its stored value times scales[r / block_rows][c / block_columns] (the scales' leading dimensions
// flattened likewise). Block FP8 (DeepSeek-V3's README_WEIGHTS.md): 2-D, 128x128 blocks, edge blocks may be partial.
// MXFP4 (OCP MX; gpt-oss): 1x32 blocks along the last dimension, e8m0 scales.
struct BlockScales {
  const TensorInfo* scales = nullptr;  // [ceil(rows / block_rows), ceil(columns / block_columns)] of the whole weight
  int64_t block_rows = 0;
  int64_t block_columns = 0;
  // Where a view (a tensor-parallel shard's rows or columns) starts in the whole weight, which the blocks tile.
  int64_t first_row = 0;
  int64_t first_column = 0;
};

struct TensorInfo {
  std::string name;
  std::filesystem::path file;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  const std::byte* data = nullptr;  // valid while the owner of the memory (e.g. the mapped file) lives
  size_t size_bytes = 0;
  std::optional<BlockScales> block_scales;  // set for a block-quantized weight (dtype F8_E4M3 or F4_E2M1)

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
};

std::string shape_string(const std::vector<int64_t>& shape);

// Bytes of one index of dimension 0 (a row of a 2-D tensor); 0 for a tensor without rows.
size_t row_bytes(const TensorInfo& info);
// Rows [begin, begin + count) of `info`, viewing its memory; a block-quantized one keeps its whole weight's blocks.
TensorInfo row_view(const TensorInfo& info, int64_t begin, int64_t count);

// The tensor's values as float32 into dst[numel()]: converted from its dtype and, for a block-quantized weight,
// multiplied by its block's scale in float32, as DeepSeek's inference/kernel.py weight_dequant does (exact for bf16
// and f16 scales, whose products with an e4m3 value fit float32's significand, and for e8m0 scales, powers of two).
void dequantize_to_f32(const TensorInfo& info, float* dst);

}  // namespace tern
