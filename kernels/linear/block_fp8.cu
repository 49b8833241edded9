#include <stdexcept>
#include <string>

#include "common/dependent_launch.cuh"
#include "common/device_math.cuh"
#include "linear/block_fp8.h"

namespace tern::kernels {

namespace {

constexpr int kBlock = 128;
constexpr float kE4m3Max = 448.0f;
constexpr int kQuantizeWarps = 8;

// A warp per (row, 128 columns): 4 values a lane.
// With group_rows, row r's scales go to its group's own layout (launch_quantize_row_groups_fp8).
__global__ void __launch_bounds__(kQuantizeWarps * 32)
    quantize_rows_fp8_kernel(const __nv_bfloat16* x, int m, int k, __nv_fp8_e4m3* codes, float* scales,
                             const int32_t* group_rows, int num_groups) {
  const int column_blocks = (k + kBlock - 1) / kBlock;
  const int64_t item = static_cast<int64_t>(blockIdx.x) * kQuantizeWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  wait_for_prior_grids();
  allow_dependent_grids();
  if (item >= static_cast<int64_t>(m) * column_blocks) return;
  const int row = static_cast<int>(item / column_blocks);
  if (group_rows && row >= group_rows[num_groups]) return;  // no group's: its scale has no place
  const int block = static_cast<int>(item % column_blocks);
  const int column = block * kBlock + 4 * lane;
  float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  if (column < k) {  // k is a multiple of 16: a lane's 4 values are all in or all out; element loads: x may be a
                     // view at any bf16 offset
#pragma unroll
    for (int i = 0; i < 4; ++i) v[i] = __bfloat162float(x[static_cast<int64_t>(row) * k + column + i]);
  }
  const float amax = warp_max(fmaxf(fmaxf(fabsf(v[0]), fabsf(v[1])), fmaxf(fabsf(v[2]), fabsf(v[3]))));
  const float scale = amax > 0.0f ? amax / kE4m3Max : 1.0f;
  if (column < k) {
    const __nv_fp8x2_storage_t lo =
        __nv_cvt_float2_to_fp8x2(make_float2(v[0] / scale, v[1] / scale), __NV_SATFINITE, __NV_E4M3);
    const __nv_fp8x2_storage_t hi =
        __nv_cvt_float2_to_fp8x2(make_float2(v[2] / scale, v[3] / scale), __NV_SATFINITE, __NV_E4M3);
    *reinterpret_cast<uint32_t*>(codes + static_cast<int64_t>(row) * k + column) =
        static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16);
  }
  int group_begin = 0, group_size = m;
  if (group_rows) {  // the last group starting at or before the row (empty groups start where the next one does)
    int lo = 0, hi = num_groups;
    while (hi - lo > 1) {
      const int mid = (lo + hi) / 2;
      if (group_rows[mid] <= row) {
        lo = mid;
      } else {
        hi = mid;
      }
    }
    group_begin = group_rows[lo];
    group_size = group_rows[lo + 1] - group_begin;
  }
  if (lane == 0) {
    scales[static_cast<int64_t>(group_begin) * column_blocks + static_cast<int64_t>(block) * group_size + row -
           group_begin] = scale;
  }
}

// 16 codes a thread.
__global__ void dequantize_block_fp8_kernel(const __nv_fp8_e4m3* codes, const float* scales, int64_t rows,
                                            int64_t columns, int64_t scale_stride, __nv_bfloat16* out) {
  wait_for_prior_grids();
  allow_dependent_grids();
  const int64_t chunks_per_row = columns / 16;
  const int64_t chunk = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (chunk >= rows * chunks_per_row) return;
  const int64_t row = chunk / chunks_per_row;
  const int64_t column = chunk % chunks_per_row * 16;
  store_dequantized16(*reinterpret_cast<const uint4*>(codes + row * columns + column),
                      scales[row / kBlock * scale_stride + column / kBlock], out + row * columns + column);
}

}  // namespace

void launch_quantize_rows_fp8(const __nv_bfloat16* x, int64_t m, int64_t k, __nv_fp8_e4m3* codes, float* scales,
                              cudaStream_t stream) {
  if (m < 0 || k <= 0 || k % 16 != 0 || m >= (int64_t{1} << 31) || k >= (int64_t{1} << 31)) {
    throw std::invalid_argument("quantize_rows_fp8: " + std::to_string(m) + " rows of " + std::to_string(k) +
                                " columns (a positive multiple of 16)");
  }
  if (m == 0) return;
  const int64_t items = m * ((k + kBlock - 1) / kBlock);
  launch_dependent("quantize_rows_fp8", quantize_rows_fp8_kernel,
                   static_cast<unsigned>((items + kQuantizeWarps - 1) / kQuantizeWarps), kQuantizeWarps * 32, 0,
                   stream, x, static_cast<int>(m), static_cast<int>(k), codes, scales,
                   static_cast<const int32_t*>(nullptr), 0);
}

void launch_quantize_row_groups_fp8(const __nv_bfloat16* x, const int32_t* group_rows, int num_groups, int64_t rows,
                                    int64_t k, __nv_fp8_e4m3* codes, float* scales, cudaStream_t stream) {
  if (rows < 0 || num_groups <= 0 || k <= 0 || k % 16 != 0 || rows >= (int64_t{1} << 31) ||
      k >= (int64_t{1} << 31)) {
    throw std::invalid_argument("quantize_row_groups_fp8: " + std::to_string(rows) + " rows in " +
                                std::to_string(num_groups) + " groups of " + std::to_string(k) +
                                " columns (a positive multiple of 16)");
  }
  if (rows == 0) return;
  const int64_t items = rows * ((k + kBlock - 1) / kBlock);
  launch_dependent("quantize_row_groups_fp8", quantize_rows_fp8_kernel,
                   static_cast<unsigned>((items + kQuantizeWarps - 1) / kQuantizeWarps), kQuantizeWarps * 32, 0,
                   stream, x, static_cast<int>(rows), static_cast<int>(k), codes, scales, group_rows, num_groups);
}

void launch_dequantize_block_fp8(const __nv_fp8_e4m3* codes, const float* scales, int64_t rows, int64_t columns,
                                 int64_t scale_stride, __nv_bfloat16* out, cudaStream_t stream) {
  if (rows < 0 || columns <= 0 || columns % 16 != 0 || scale_stride < (columns + kBlock - 1) / kBlock) {
    throw std::invalid_argument("dequantize_block_fp8: " + std::to_string(rows) + " rows of " +
                                std::to_string(columns) + " columns (a positive multiple of 16), scale stride " +
                                std::to_string(scale_stride));
  }
  const int64_t chunks = rows * (columns / 16);
  if (chunks == 0) return;
  constexpr int kThreads = 256;
  launch_dependent("dequantize_block_fp8", dequantize_block_fp8_kernel,
                   static_cast<unsigned>((chunks + kThreads - 1) / kThreads), kThreads, 0, stream, codes, scales,
                   rows, columns, scale_stride, out);
}

}  // namespace tern::kernels
