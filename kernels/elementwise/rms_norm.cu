#include <stdexcept>

#include "common/dependent_launch.cuh"
#include "common/device_math.cuh"
#include "elementwise/rms_norm.h"

namespace tern::kernels {

namespace {

constexpr int kThreads = 256;

// One block per row. Vectorized rows (width % 8 == 0) move 16 bytes per access; the second pass re-reads the row
// from L1/L2, which is cheaper than keeping arbitrary widths in registers.
template <bool Vectorized>
__global__ void __launch_bounds__(kThreads) rms_norm_kernel(const RmsNormParams p) {
  wait_for_prior_grids();
  allow_dependent_grids();
  const int64_t row = blockIdx.x;
  const __nv_bfloat16* x = p.x + row * p.width;
  __nv_bfloat16* out = p.out + row * p.width;
  __nv_bfloat16* residual = p.residual ? p.residual + row * p.width : nullptr;
  float sum_sq = 0.0f;
  if constexpr (Vectorized) {
    for (int i = threadIdx.x * 8; i < p.width; i += kThreads * 8) {
      float v[8];
      load_f32x8(x + i, v);
      if (residual) {
        float r[8];
        load_f32x8(residual + i, r);
#pragma unroll
        for (int j = 0; j < 8; ++j) v[j] += r[j];
        store_f32x8(residual + i, v);
        load_f32x8(residual + i, v);  // normalize the residual as stored (bf16), as the unfused ops would
      }
#pragma unroll
      for (int j = 0; j < 8; ++j) sum_sq += v[j] * v[j];
    }
  } else {
    for (int i = threadIdx.x; i < p.width; i += kThreads) {
      float v = __bfloat162float(x[i]);
      if (residual) {
        const __nv_bfloat16 stored = __float2bfloat16(v + __bfloat162float(residual[i]));
        residual[i] = stored;
        v = __bfloat162float(stored);
      }
      sum_sq += v * v;
    }
  }
  const float scale = rsqrtf(block_sum<kThreads / 32>(sum_sq) / p.width + p.eps);
  const __nv_bfloat16* src = residual ? residual : x;
  if constexpr (Vectorized) {
    for (int i = threadIdx.x * 8; i < p.width; i += kThreads * 8) {
      float v[8], w[8];
      load_f32x8(src + i, v);
      load_f32x8(p.weight + i, w);
#pragma unroll
      for (int j = 0; j < 8; ++j) v[j] = v[j] * scale * w[j];
      store_f32x8(out + i, v);
    }
  } else {
    for (int i = threadIdx.x; i < p.width; i += kThreads) {
      out[i] = __float2bfloat16(__bfloat162float(src[i]) * scale * __bfloat162float(p.weight[i]));
    }
  }
}

// Rows of up to kThreads * 8 * kMaxVectors elements in 16-byte vectors (the hidden sizes of the models served, and
// DeepSeek-V4's 4 hyper-connection streams of 4,096 flattened): the row stays in registers between the sum of
// squares and the scaling, and the weight, a constant, is loaded before waiting for the kernel that writes x, so
// that a decode step's norm costs one round trip to memory.
constexpr int kMaxVectors = 8;

template <int Vectors>
__global__ void __launch_bounds__(kThreads) rms_norm_registers_kernel(const RmsNormParams p) {
  const int64_t row = blockIdx.x;
  float w[Vectors][8], v[Vectors][8];
#pragma unroll
  for (int k = 0; k < Vectors; ++k) {
    const int i = (threadIdx.x + k * kThreads) * 8;
    if (i < p.width) load_f32x8(p.weight + i, w[k]);
  }
  wait_for_prior_grids();
  allow_dependent_grids();
  const __nv_bfloat16* x = p.x + row * p.width;
  __nv_bfloat16* residual = p.residual ? p.residual + row * p.width : nullptr;
  float sum_sq = 0.0f;
#pragma unroll
  for (int k = 0; k < Vectors; ++k) {
    const int i = (threadIdx.x + k * kThreads) * 8;
    if (i >= p.width) continue;
    load_f32x8(x + i, v[k]);
    if (residual) {
      float r[8];
      load_f32x8(residual + i, r);
      Bf16x8 stored;
#pragma unroll
      for (int j = 0; j < 4; ++j) stored.pair[j] = __floats2bfloat162_rn(v[k][2 * j] + r[2 * j], v[k][2 * j + 1] + r[2 * j + 1]);
      *reinterpret_cast<Bf16x8*>(residual + i) = stored;
      load_f32x8(reinterpret_cast<const __nv_bfloat16*>(&stored), v[k]);  // the residual as stored (bf16)
    }
#pragma unroll
    for (int j = 0; j < 8; ++j) sum_sq += v[k][j] * v[k][j];
  }
  const float scale = rsqrtf(block_sum<kThreads / 32>(sum_sq) / p.width + p.eps);
  __nv_bfloat16* out = p.out + row * p.width;
#pragma unroll
  for (int k = 0; k < Vectors; ++k) {
    const int i = (threadIdx.x + k * kThreads) * 8;
    if (i >= p.width) continue;
#pragma unroll
    for (int j = 0; j < 8; ++j) v[k][j] = v[k][j] * scale * w[k][j];
    store_f32x8(out + i, v[k]);
  }
}

}  // namespace

void launch_rms_norm(const RmsNormParams& p, cudaStream_t stream) {
  if (p.width <= 0 || p.num_rows < 0) throw std::invalid_argument("rms_norm: empty or negative shape");
  if (p.num_rows == 0) return;
  const bool aligned = p.width % 8 == 0;
  const int vectors = (p.width / 8 + kThreads - 1) / kThreads;
  if (aligned && vectors <= 1) {
    launch_dependent("rms_norm", rms_norm_registers_kernel<1>, p.num_rows, kThreads, 0, stream, p);
  } else if (aligned && vectors <= 2) {
    launch_dependent("rms_norm", rms_norm_registers_kernel<2>, p.num_rows, kThreads, 0, stream, p);
  } else if (aligned && vectors <= 4) {
    launch_dependent("rms_norm", rms_norm_registers_kernel<4>, p.num_rows, kThreads, 0, stream, p);
  } else if (aligned && vectors <= kMaxVectors) {
    launch_dependent("rms_norm", rms_norm_registers_kernel<kMaxVectors>, p.num_rows, kThreads, 0, stream, p);
  } else if (aligned) {
    launch_dependent("rms_norm", rms_norm_kernel<true>, p.num_rows, kThreads, 0, stream, p);
  } else {
    launch_dependent("rms_norm", rms_norm_kernel<false>, p.num_rows, kThreads, 0, stream, p);
  }
}

}  // namespace tern::kernels
