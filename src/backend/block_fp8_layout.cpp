#include "backend/block_fp8_layout.h"

namespace tern {

namespace {

bool fits_grid(const TensorInfo& part, int64_t columns) {
  if (part.dtype != DType::F8_E4M3 || !part.block_scales || part.shape.size() != 2) return false;
  const BlockScales& blocks = *part.block_scales;
  constexpr int64_t block = BlockFp8Layout::kBlock;
  return blocks.block_rows == block && blocks.block_columns == block && blocks.first_row % block == 0 &&
         blocks.first_column % block == 0 && part.shape[1] == columns && blocks.scales->shape.size() == 2;
}

}  // namespace

std::optional<BlockFp8Layout> block_fp8_layout(std::span<const TensorInfo* const> parts, int64_t groups) {
  if (parts.empty() || parts[0]->shape.size() != 2) return std::nullopt;
  if (groups < 1 || parts.size() % static_cast<size_t>(groups) != 0) return std::nullopt;
  BlockFp8Layout layout;
  layout.groups = groups;
  layout.columns = parts[0]->shape[1];
  if (layout.columns == 0 || layout.columns % BlockFp8Layout::kColumnMultiple != 0) return std::nullopt;
  const size_t group_parts = parts.size() / static_cast<size_t>(groups);
  int64_t group_rows = 0, first_group_rows = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    const TensorInfo& part = *parts[i];
    if (!fits_grid(part, layout.columns)) return std::nullopt;
    const bool ends_group = (i + 1) % group_parts == 0;
    if (!ends_group && part.shape[0] % BlockFp8Layout::kBlock != 0) return std::nullopt;
    group_rows += part.shape[0];
    if (ends_group) {
      if (i + 1 == group_parts) first_group_rows = group_rows;
      if (group_rows != first_group_rows) return std::nullopt;
      group_rows = 0;
    }
    layout.rows += part.shape[0];
  }
  layout.scale_stride = BlockFp8Layout::stride_for(layout.columns);
  layout.scales.assign(static_cast<size_t>(layout.scale_rows() * layout.scale_stride), 0.0f);
  const int64_t column_blocks = (layout.columns + BlockFp8Layout::kBlock - 1) / BlockFp8Layout::kBlock;
  int64_t first_block_row = 0;
  for (const TensorInfo* part : parts) {
    const BlockScales& blocks = *part->block_scales;
    const TensorInfo& scales = *blocks.scales;
    std::vector<float> values(static_cast<size_t>(scales.numel()));
    convert_to_f32(scales.dtype, scales.data, values.data(), values.size());
    const int64_t part_block_rows = (part->shape[0] + BlockFp8Layout::kBlock - 1) / BlockFp8Layout::kBlock;
    const int64_t source_row = blocks.first_row / BlockFp8Layout::kBlock;
    const int64_t source_column = blocks.first_column / BlockFp8Layout::kBlock;
    const int64_t source_stride = scales.shape[1];
    for (int64_t r = 0; r < part_block_rows; ++r) {
      for (int64_t c = 0; c < column_blocks; ++c) {
        layout.scales[(first_block_row + r) * layout.scale_stride + c] =
            values[(source_row + r) * source_stride + source_column + c];
      }
    }
    first_block_row += part_block_rows;
  }
  return layout;
}

}  // namespace tern
