#include "core/tensor_info.h"

#include <algorithm>

#include "core/error.h"

namespace tern {

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

size_t row_bytes(const TensorInfo& info) {
  return info.shape.empty() || info.shape[0] == 0 ? 0 : info.size_bytes / static_cast<size_t>(info.shape[0]);
}

TensorInfo row_view(const TensorInfo& info, int64_t begin, int64_t count) {
  TensorInfo view = info;
  const size_t bytes = row_bytes(info);
  view.data = info.data + static_cast<size_t>(begin) * bytes;
  view.shape[0] = count;
  view.size_bytes = static_cast<size_t>(count) * bytes;
  if (view.block_scales) view.block_scales->first_row += begin;
  return view;
}

void dequantize_to_f32(const TensorInfo& info, float* dst) {
  convert_to_f32(info.dtype, info.data, dst, static_cast<size_t>(info.numel()));
  if (!info.block_scales) return;
  const BlockScales& blocks = *info.block_scales;
  const TensorInfo& scales = *blocks.scales;
  if (info.shape.empty() || scales.shape.empty()) {
    fail("{}: block-quantized tensor '{}' of shape {} is a scalar", info.file.string(), info.name,
         shape_string(info.shape));
  }
  const int64_t columns = info.shape.back(), rows = columns == 0 ? 0 : info.numel() / columns;
  if (rows == 0) return;
  // Only the scale rows of this view's rows (a view of a few rows of a large weight is dequantized many times).
  const int64_t scale_columns = scales.shape.back();
  const int64_t first_scale_row = blocks.first_row / blocks.block_rows;
  const int64_t scale_rows = (blocks.first_row + rows - 1) / blocks.block_rows - first_scale_row + 1;
  std::vector<float> scale(static_cast<size_t>(scale_rows * scale_columns));
  convert_to_f32(scales.dtype, scales.data + dtype_bytes(scales.dtype, first_scale_row * scale_columns), scale.data(),
                 scale.size());
  for (int64_t r = 0; r < rows; ++r) {
    const float* row_scales =
        scale.data() + ((blocks.first_row + r) / blocks.block_rows - first_scale_row) * scale_columns;
    float* out = dst + r * columns;
    // Block by block, the scale fetched once for each run of columns it covers.
    for (int64_t c = 0; c < columns;) {
      const int64_t block = (blocks.first_column + c) / blocks.block_columns;
      const int64_t end = std::min(columns, (block + 1) * blocks.block_columns - blocks.first_column);
      const float s = row_scales[block];
      for (; c < end; ++c) out[c] *= s;
    }
  }
}

}  // namespace tern
