#include "core/tensor_info.h"

#include "core/error.h"

namespace tern {

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
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
  std::vector<float> scale(static_cast<size_t>(scales.numel()));
  convert_to_f32(scales.dtype, scales.data, scale.data(), scale.size());
  const int64_t columns = info.shape.back(), rows = columns == 0 ? 0 : info.numel() / columns;
  const int64_t scale_columns = scales.shape.back();
  for (int64_t r = 0; r < rows; ++r) {
    const float* row_scales = scale.data() + (blocks.first_row + r) / blocks.block_rows * scale_columns;
    float* out = dst + r * columns;
    for (int64_t c = 0; c < columns; ++c) out[c] *= row_scales[(blocks.first_column + c) / blocks.block_columns];
  }
}

}  // namespace tern
