#pragma once
// How a backend with FP4 kernels keeps an MXFP4 weight (OCP MX FP4: gpt-oss's experts and DeepSeek-V4's routed
// experts, docs/quantization.md): its e2m1 codes as the checkpoint stores them, two to a byte, element 2i in the low
// nibble of byte i, [rows, columns / 2] bytes, and one e8m0 scale byte (2^(s - 127)) per row and 32 columns,
// [rows, columns / 32], both in the weight's row order.
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "core/tensor_info.h"

namespace tern {

struct Mxfp4Layout {
  static constexpr int64_t kGroup = 32;  // elements per scale

  int64_t rows = 0;
  int64_t columns = 0;
  std::vector<uint8_t> scales;  // [rows * columns / kGroup]

  int64_t scale_columns() const { return columns / kGroup; }
};

// The layout of the weight that `parts` make concatenated along rows (their leading dimensions flattened into rows),
// with every part's scales gathered in its rows' order; nullopt unless every part is F4_E2M1 with 1 x 32 e8m0 scales
// (U8 or F8_E8M0) and the same column count (a multiple of 32), each starting on a scale group of its whole
// checkpoint tensor.
std::optional<Mxfp4Layout> mxfp4_layout(std::span<const TensorInfo* const> parts);

}  // namespace tern
