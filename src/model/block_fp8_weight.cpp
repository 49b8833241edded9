#include "model/block_fp8_weight.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <thread>

#include "core/error.h"

namespace tern {

namespace {

constexpr float kE4m3Max = 448.0f;

// Quantizes the weight's row of blocks `grid_row` into `codes` (the whole weight's) and `scales` (that row's).
void quantize_band(const TensorInfo& weight, int64_t block_rows, int64_t block_columns, int64_t grid_row,
                   uint8_t* codes, float* scales) {
  const int64_t rows = weight.shape[0], columns = weight.shape[1];
  const int64_t grid_columns = (columns + block_columns - 1) / block_columns;
  const int64_t first_row = grid_row * block_rows;
  const int64_t band_rows = std::min(block_rows, rows - first_row);
  std::vector<float> band(static_cast<size_t>(band_rows * columns));
  convert_to_f32(weight.dtype, weight.data + static_cast<size_t>(first_row * columns) * dtype_size(weight.dtype),
                 band.data(), band.size());
  std::fill(scales, scales + grid_columns, 0.0f);
  for (int64_t r = 0; r < band_rows; ++r) {
    for (int64_t c = 0; c < columns; ++c) {
      const float x = band[static_cast<size_t>(r * columns + c)];
      if (!std::isfinite(x)) {
        fail("{}: tensor '{}' holds {} at [{}, {}]; FP8 quantization needs finite weights", weight.file.string(),
             weight.name, x, first_row + r, c);
      }
      float& amax = scales[c / block_columns];
      amax = std::max(amax, std::abs(x));
    }
  }
  // A block of zeros (or of values so small that amax / 448 underflows float32) gets scale 1: its elements
  // quantize to zero.
  for (int64_t b = 0; b < grid_columns; ++b) {
    const float scale = scales[b] / kE4m3Max;
    scales[b] = scale > 0.0f ? scale : 1.0f;
  }
  for (int64_t r = 0; r < band_rows; ++r) {
    uint8_t* row_codes = codes + (first_row + r) * columns;
    const float* values = band.data() + r * columns;
    for (int64_t c = 0; c < columns; ++c) row_codes[c] = f32_to_f8_e4m3(values[c] / scales[c / block_columns]);
  }
}

}  // namespace

BlockFp8Weight::BlockFp8Weight(const TensorInfo& weight, int64_t block_rows, int64_t block_columns) {
  if (weight.shape.size() != 2) {
    fail("{}: tensor '{}' has shape {}; FP8 quantization takes 2-D [out, in] weights", weight.file.string(),
         weight.name, shape_string(weight.shape));
  }
  if (weight.dtype != DType::BF16 && weight.dtype != DType::F16 && weight.dtype != DType::F32) {
    fail("{}: tensor '{}' is {}; FP8 quantization takes BF16, F16 or F32 weights", weight.file.string(), weight.name,
         dtype_name(weight.dtype));
  }
  if (block_rows <= 0 || block_columns <= 0) fail("FP8 quantization: blocks of {}x{}", block_rows, block_columns);
  const int64_t rows = weight.shape[0], columns = weight.shape[1];
  const int64_t grid_rows = (rows + block_rows - 1) / block_rows;
  const int64_t grid_columns = (columns + block_columns - 1) / block_columns;
  codes_.resize(static_cast<size_t>(rows * columns));
  scale_values_.resize(static_cast<size_t>(grid_rows * grid_columns));
  // Rows of blocks are independent: the cores share them (loading a large model quantizes billions of elements).
  const int64_t num_workers =
      std::clamp<int64_t>(std::thread::hardware_concurrency(), 1, std::max<int64_t>(grid_rows, 1));
  std::vector<std::exception_ptr> errors(static_cast<size_t>(num_workers));
  const auto work = [&](int64_t worker) {
    try {
      for (int64_t grid_row = worker; grid_row < grid_rows; grid_row += num_workers) {
        quantize_band(weight, block_rows, block_columns, grid_row, codes_.data(),
                      scale_values_.data() + grid_row * grid_columns);
      }
    } catch (...) {
      errors[static_cast<size_t>(worker)] = std::current_exception();
    }
  };
  std::vector<std::thread> workers;
  for (int64_t worker = 1; worker < num_workers; ++worker) workers.emplace_back(work, worker);
  work(0);
  for (auto& worker : workers) worker.join();
  for (const auto& error : errors) {
    if (error) std::rethrow_exception(error);
  }

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
