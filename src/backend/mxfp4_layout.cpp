#include "backend/mxfp4_layout.h"

#include <cstring>

namespace tern {

namespace {

bool fits_groups(const TensorInfo& part, int64_t columns) {
  if (part.dtype != DType::F4_E2M1 || !part.block_scales || part.shape.empty()) return false;
  const BlockScales& blocks = *part.block_scales;
  const TensorInfo& scales = *blocks.scales;
  return blocks.block_rows == 1 && blocks.block_columns == Mxfp4Layout::kGroup &&
         blocks.first_column % Mxfp4Layout::kGroup == 0 && part.shape.back() == columns && !scales.shape.empty() &&
         (scales.dtype == DType::U8 || scales.dtype == DType::F8_E8M0);
}

}  // namespace

std::optional<Mxfp4Layout> mxfp4_layout(std::span<const TensorInfo* const> parts) {
  if (parts.empty() || parts[0]->shape.empty()) return std::nullopt;
  Mxfp4Layout layout;
  layout.columns = parts[0]->shape.back();
  if (layout.columns == 0 || layout.columns % Mxfp4Layout::kGroup != 0) return std::nullopt;
  for (const TensorInfo* part : parts) {
    if (!fits_groups(*part, layout.columns)) return std::nullopt;
    layout.rows += part->numel() / layout.columns;
  }
  const int64_t groups = layout.scale_columns();
  layout.scales.resize(static_cast<size_t>(layout.rows * groups));
  uint8_t* dst = layout.scales.data();
  for (const TensorInfo* part : parts) {
    const BlockScales& blocks = *part->block_scales;
    const TensorInfo& scales = *blocks.scales;
    const int64_t source_stride = scales.shape.back();
    const int64_t first_group = blocks.first_column / Mxfp4Layout::kGroup;
    const auto* source = reinterpret_cast<const uint8_t*>(scales.data);
    for (int64_t r = 0; r < part->numel() / layout.columns; ++r) {
      std::memcpy(dst, source + (blocks.first_row + r) * source_stride + first_group, static_cast<size_t>(groups));
      dst += groups;
    }
  }
  return layout;
}

}  // namespace tern
