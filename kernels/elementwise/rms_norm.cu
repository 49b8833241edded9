#include <stdexcept>

#include "common/dependent_launch.cuh"
#include "common/device_math.cuh"
#include "elementwise/rms_norm.h"

namespace tern::kernels {

namespace {

constexpr int kThreads = 256;

__device__ float block_sum(float v) {
  __shared__ float partial[kThreads / 32];
  v = warp_sum(v);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
  __syncthreads();
  float total = 0.0f;
#pragma unroll
  for (int w = 0; w < kThreads / 32; ++w) total += partial[w];
  return total;
}

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
  const float scale = rsqrtf(block_sum(sum_sq) / p.width + p.eps);
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

}  // namespace

void launch_rms_norm(const RmsNormParams& p, cudaStream_t stream) {
  if (p.width <= 0 || p.num_rows < 0) throw std::invalid_argument("rms_norm: empty or negative shape");
  if (p.num_rows == 0) return;
  const bool aligned = p.width % 8 == 0;
  if (aligned) {
    launch_dependent("rms_norm", rms_norm_kernel<true>, p.num_rows, kThreads, 0, stream, p);
  } else {
    launch_dependent("rms_norm", rms_norm_kernel<false>, p.num_rows, kThreads, 0, stream, p);
  }
}

}  // namespace tern::kernels
