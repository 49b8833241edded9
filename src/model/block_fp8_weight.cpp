#include "model/block_fp8_weight.h"

#include <algorithm>
#include <cmath>
#include <exception>

#include "core/error.h"

namespace tern {

namespace {

constexpr float kE4m3Max = 448.0f;

// The smallest power of two at least `x` (> 0): frexp gives x = m 2^e with m in [0.5, 1), exactly.
float power_of_two_at_least(float x) {
  int exponent = 0;
  const float mantissa = std::frexp(x, &exponent);
  return std::ldexp(1.0f, mantissa == 0.5f ? exponent - 1 : exponent);
}

// Quantizes the block at (grid_row, grid_column) into `codes` (the whole weight's) and returns its scale. `block`
// holds the block's values in float32 (block_rows x block_columns at most).
float quantize_block(const TensorInfo& weight, int64_t block_rows, int64_t block_columns, int64_t grid_row,
                     int64_t grid_column, bool power_of_two_scale, float* block, uint8_t* codes) {
  const int64_t rows = weight.shape[0], columns = weight.shape[1];
  const int64_t first_row = grid_row * block_rows, first_column = grid_column * block_columns;
  const int64_t height = std::min(block_rows, rows - first_row), width = std::min(block_columns, columns - first_column);
  const size_t element = dtype_size(weight.dtype);
  float amax = 0.0f;
  for (int64_t r = 0; r < height; ++r) {
    float* values = block + r * width;
    convert_to_f32(weight.dtype, weight.data + static_cast<size_t>((first_row + r) * columns + first_column) * element,
                   values, static_cast<size_t>(width));
    float row_amax = 0.0f;
    bool finite = true;
    for (int64_t c = 0; c < width; ++c) {  // no branch inside: the compiler vectorizes it
      finite &= std::isfinite(values[c]);
      row_amax = std::max(row_amax, std::abs(values[c]));
    }
    if (!finite) {
      const int64_t c = std::find_if(values, values + width, [](float x) { return !std::isfinite(x); }) - values;
      fail("{}: tensor '{}' holds {} at [{}, {}]; FP8 quantization needs finite weights", weight.file.string(),
           weight.name, values[c], first_row + r, first_column + c);
    }
    amax = std::max(amax, row_amax);
  }
  // A block of zeros (or of values so small that amax / 448 underflows float32) gets scale 1: its elements
  // quantize to zero.
  const float amax_scale = amax / kE4m3Max;
  const float scale = amax_scale > 0.0f ? (power_of_two_scale ? power_of_two_at_least(amax_scale) : amax_scale) : 1.0f;
  for (int64_t r = 0; r < height; ++r) {
    uint8_t* row_codes = codes + (first_row + r) * columns + first_column;
    const float* values = block + r * width;
    for (int64_t c = 0; c < width; ++c) row_codes[c] = f32_to_f8_e4m3(values[c] / scale);
  }
  return scale;
}

}  // namespace

BlockFp8Weight::BlockFp8Weight(const TensorInfo& source, int64_t block_rows, int64_t block_columns) {
  if (source.shape.size() != 2) {
    fail("{}: tensor '{}' has shape {}; FP8 quantization takes 2-D [out, in] weights", source.file.string(),
         source.name, shape_string(source.shape));
  }
  const bool fp4 = source.dtype == DType::F4_E2M1 && source.block_scales;
  if (source.dtype != DType::BF16 && source.dtype != DType::F16 && source.dtype != DType::F32 && !fp4) {
    fail("{}: tensor '{}' is {}; FP8 quantization takes BF16, F16 or F32 weights, or FP4 ones with their scales",
         source.file.string(), source.name, dtype_name(source.dtype));
  }
  // An FP4 weight's values are exact in float32 (e2m1 times a power of two). The cores take chunks of rows: a
  // real DeepSeek-V4 has billions of FP4 expert weights.
  std::vector<float> fp4_values;
  TensorInfo weight = source;
  if (fp4) {
    const int64_t rows = source.shape[0], columns = source.shape[1];
    if (columns % 2 != 0) {
      fail("{}: FP4 tensor '{}' has {} columns, not whole bytes", source.file.string(), source.name, columns);
    }
    fp4_values.resize(static_cast<size_t>(source.numel()));
    constexpr int64_t kChunkRows = 64;
#pragma omp parallel for schedule(dynamic)
    for (int64_t begin = 0; begin < rows; begin += kChunkRows) {
      const int64_t count = std::min(kChunkRows, rows - begin);
      dequantize_to_f32(row_view(source, begin, count), fp4_values.data() + begin * columns);
    }
    weight.dtype = DType::F32;
    weight.data = reinterpret_cast<const std::byte*>(fp4_values.data());
    weight.size_bytes = fp4_values.size() * sizeof(float);
    weight.block_scales.reset();
  }
  if (block_rows <= 0 || block_columns <= 0) fail("FP8 quantization: blocks of {}x{}", block_rows, block_columns);
  const int64_t rows = weight.shape[0], columns = weight.shape[1];
  const int64_t grid_rows = (rows + block_rows - 1) / block_rows;
  const int64_t grid_columns = (columns + block_columns - 1) / block_columns;
  codes_.resize(static_cast<size_t>(rows * columns));
  scale_values_.resize(static_cast<size_t>(grid_rows * grid_columns));
  // Blocks are independent: the cores share them, a block at a time, since a weight of a few rows of blocks (an
  // expert's 768 x 2,048 projection: 6) left most cores idle when they took whole rows. Loading a large model
  // quantizes billions of elements.
  const int64_t num_blocks = grid_rows * grid_columns;
  std::exception_ptr error;
#pragma omp parallel
  {
    std::vector<float> block(static_cast<size_t>(std::min(block_rows, rows) * std::min(block_columns, columns)));
#pragma omp for schedule(dynamic, 4)
    for (int64_t b = 0; b < num_blocks; ++b) {
      try {
        scale_values_[static_cast<size_t>(b)] = quantize_block(weight, block_rows, block_columns, b / grid_columns,
                                                               b % grid_columns, fp4, block.data(), codes_.data());
      } catch (...) {
#pragma omp critical(block_fp8_error)
        if (!error) error = std::current_exception();
      }
    }
  }
  if (error) std::rethrow_exception(error);

  scales_.name = weight.name + "_scale_inv";
  scales_.file = weight.file;
  scales_.dtype = DType::F32;
  scales_.shape = {grid_rows, grid_columns};
  scales_.data = reinterpret_cast<const std::byte*>(scale_values_.data());
  scales_.size_bytes = scale_values_.size() * sizeof(float);

  weight_.name = weight.name;
  weight_.file = weight.file;
  weight_.dtype = DType::F8_E4M3;
  weight_.shape = weight.shape;
  weight_.data = reinterpret_cast<const std::byte*>(codes_.data());
  weight_.size_bytes = codes_.size();
  weight_.block_scales = BlockScales{&scales_, block_rows, block_columns, 0, 0};
}

}  // namespace tern
