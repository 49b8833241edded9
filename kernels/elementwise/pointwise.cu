#include <stdexcept>

#include "common/dependent_launch.cuh"
#include "common/device_math.cuh"
#include "elementwise/pointwise.h"

namespace tern::kernels {

namespace {

constexpr int kThreads = 256;

unsigned blocks_for(int64_t count) {
  const int64_t blocks = (count + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 65535 * 16 ? blocks : 65535 * 16);
}

__global__ void silu_mul_vec_kernel(const __nv_bfloat16* gate_up, __nv_bfloat16* out, int64_t num_rows, int64_t width) {
  wait_for_prior_grids();
  allow_dependent_grids();
  const int64_t chunks_per_row = width / 8;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < num_rows * chunks_per_row;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = i / chunks_per_row;
    const int64_t c = (i % chunks_per_row) * 8;
    float g[8], u[8];
    load_f32x8(gate_up + r * 2 * width + c, g);
    load_f32x8(gate_up + r * 2 * width + width + c, u);
#pragma unroll
    for (int j = 0; j < 8; ++j) g[j] = silu(g[j]) * u[j];
    store_f32x8(out + r * width + c, g);
  }
}

__global__ void silu_mul_kernel(const __nv_bfloat16* gate_up, __nv_bfloat16* out, int64_t num_rows, int64_t width) {
  wait_for_prior_grids();
  allow_dependent_grids();
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < num_rows * width;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = i / width;
    const int64_t c = i % width;
    const float g = __bfloat162float(gate_up[r * 2 * width + c]);
    out[i] = __float2bfloat16(silu(g) * __bfloat162float(gate_up[r * 2 * width + width + c]));
  }
}

__global__ void add_kernel(__nv_bfloat16* x, const __nv_bfloat16* y, int64_t count) {
  wait_for_prior_grids();
  allow_dependent_grids();
  const int64_t num_vec = count / 8;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < num_vec; i += int64_t{gridDim.x} * blockDim.x) {
    float a[8], b[8];
    load_f32x8(x + i * 8, a);
    load_f32x8(y + i * 8, b);
#pragma unroll
    for (int j = 0; j < 8; ++j) a[j] += b[j];
    store_f32x8(x + i * 8, a);
  }
  for (int64_t i = num_vec * 8 + blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count;
       i += int64_t{gridDim.x} * blockDim.x) {
    x[i] = __float2bfloat16(__bfloat162float(x[i]) + __bfloat162float(y[i]));
  }
}

__global__ void f32_to_bf16_kernel(const float* src, __nv_bfloat16* dst, int64_t count) {
  wait_for_prior_grids();
  allow_dependent_grids();
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count; i += int64_t{gridDim.x} * blockDim.x) {
    dst[i] = __float2bfloat16(src[i]);
  }
}

__global__ void bf16_to_f32_kernel(const __nv_bfloat16* src, float* dst, int64_t count) {
  wait_for_prior_grids();
  allow_dependent_grids();
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count; i += int64_t{gridDim.x} * blockDim.x) {
    dst[i] = __bfloat162float(src[i]);
  }
}

// Element: uint16_t (one bf16) or uint4 (eight); rows outside the table's range become zeros.
template <typename Element>
__global__ void gather_rows_kernel(const Element* table, const int32_t* rows, Element* out, int64_t row_elems,
                                   GatherRange range) {
  wait_for_prior_grids();
  allow_dependent_grids();
  const int64_t r = blockIdx.x;
  const int64_t row = rows[r] - range.first_row;
  Element* dst = out + r * row_elems;
  if (row < 0 || row >= range.num_rows) {
    for (int64_t i = threadIdx.x; i < row_elems; i += blockDim.x) dst[i] = Element{};
    return;
  }
  const Element* src = table + row * row_elems;
  for (int64_t i = threadIdx.x; i < row_elems; i += blockDim.x) dst[i] = src[i];
}

// Element: uint4 where every address and width allows, else bytes; a block per row, grid-strided over rows.
template <typename Element>
__global__ void copy_2d_kernel(Element* dst, int64_t dst_pitch, const Element* src, int64_t src_pitch,
                               int64_t row_elems, int64_t rows) {
  wait_for_prior_grids();
  allow_dependent_grids();
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    for (int64_t i = threadIdx.x; i < row_elems; i += blockDim.x) dst[r * dst_pitch + i] = src[r * src_pitch + i];
  }
}

}  // namespace

void launch_copy_2d(void* dst, int64_t dst_pitch, const void* src, int64_t src_pitch, int64_t row_bytes,
                    int64_t rows, cudaStream_t stream) {
  if (rows <= 0 || row_bytes <= 0) return;
  const unsigned blocks = static_cast<unsigned>(rows < 4096 ? rows : 4096);
  const bool vectorized = (reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src) | dst_pitch |
                           src_pitch | row_bytes) % 16 == 0;
  if (vectorized) {
    launch_dependent("copy_2d", copy_2d_kernel<uint4>, blocks, 128, 0, stream, static_cast<uint4*>(dst),
                     dst_pitch / 16, static_cast<const uint4*>(src), src_pitch / 16, row_bytes / 16, rows);
  } else {
    launch_dependent("copy_2d", copy_2d_kernel<unsigned char>, blocks, 128, 0, stream, static_cast<unsigned char*>(dst),
                     dst_pitch, static_cast<const unsigned char*>(src), src_pitch, row_bytes, rows);
  }
}

void launch_silu_mul(const __nv_bfloat16* gate_up, __nv_bfloat16* out, int64_t num_rows, int64_t width,
                     cudaStream_t stream) {
  if (num_rows == 0 || width == 0) return;
  if (width % 8 == 0) {
    launch_dependent("silu_mul", silu_mul_vec_kernel, blocks_for(num_rows * width / 8), kThreads, 0, stream, gate_up, out,
                     num_rows, width);
  } else {
    launch_dependent("silu_mul", silu_mul_kernel, blocks_for(num_rows * width), kThreads, 0, stream, gate_up, out, num_rows,
                     width);
  }
}

void launch_add(__nv_bfloat16* x, const __nv_bfloat16* y, int64_t count, cudaStream_t stream) {
  if (count == 0) return;
  const bool aligned = reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(y) % 16 == 0;
  if (!aligned) throw std::invalid_argument("add: operands must be 16-byte aligned");
  launch_dependent("add", add_kernel, blocks_for((count + 7) / 8), kThreads, 0, stream, x, y, count);
}

void launch_f32_to_bf16(const float* src, __nv_bfloat16* dst, int64_t count, cudaStream_t stream) {
  if (count == 0) return;
  launch_dependent("f32_to_bf16", f32_to_bf16_kernel, blocks_for(count), kThreads, 0, stream, src, dst, count);
}

void launch_bf16_to_f32(const __nv_bfloat16* src, float* dst, int64_t count, cudaStream_t stream) {
  if (count == 0) return;
  launch_dependent("bf16_to_f32", bf16_to_f32_kernel, blocks_for(count), kThreads, 0, stream, src, dst, count);
}

void launch_gather_rows(const void* table, const int32_t* rows, void* out, int64_t num_rows, int64_t row_bytes,
                        cudaStream_t stream, GatherRange range) {
  if (row_bytes % 2 != 0) throw std::invalid_argument("gather_rows: rows must be a whole number of 2-byte elements");
  if (num_rows == 0 || row_bytes == 0) return;
  const bool vectorized = row_bytes % 16 == 0 && reinterpret_cast<uintptr_t>(table) % 16 == 0 &&
                          reinterpret_cast<uintptr_t>(out) % 16 == 0;
  if (vectorized) {
    launch_dependent("gather_rows", gather_rows_kernel<uint4>, num_rows, 128, 0, stream,
                     static_cast<const uint4*>(table), rows, static_cast<uint4*>(out), row_bytes / 16, range);
  } else {
    launch_dependent("gather_rows", gather_rows_kernel<uint16_t>, num_rows, 128, 0, stream,
                     static_cast<const uint16_t*>(table), rows, static_cast<uint16_t*>(out), row_bytes / 2, range);
  }
}

}  // namespace tern::kernels
