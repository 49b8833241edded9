#include <stdexcept>
#include <string>

#include "common/dependent_launch.cuh"
#include "common/device_math.cuh"
#include "linear/gemv.h"

namespace tern::kernels {

namespace {

constexpr int kWarps = 16;
constexpr int kUnroll = 4;  // 16-byte weight loads in flight per lane
constexpr size_t kMaxSharedBytes = 48 * 1024;  // no opt-in attribute needed (one per device and kernel)

// Launched as a programmatic dependent: each warp loads the first kUnroll chunks of its weight row (constants)
// before waiting for the kernel that writes x, so the start of the weight stream overlaps that kernel.
__global__ void __launch_bounds__(kWarps * 32) gemv_kernel(const __nv_bfloat16* __restrict__ x,
                                                           const __nv_bfloat16* __restrict__ weight,
                                                           const __nv_bfloat16* __restrict__ bias,
                                                           __nv_bfloat16* __restrict__ out, int n, int k) {
  extern __shared__ uint4 x_shared[];  // x as chunks of 8 bf16
  const int chunks = k / 8;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int row = min(blockIdx.x * kWarps + warp, n - 1);  // a past-the-end warp still loads x for its block
  const uint4* w = reinterpret_cast<const uint4*>(weight + static_cast<int64_t>(row) * k);
  uint4 loaded[kUnroll];
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const int c = lane + 32 * u;
    loaded[u] = c < chunks ? __ldg(w + c) : make_uint4(0, 0, 0, 0);
  }
  wait_for_prior_grids();
  allow_dependent_grids();
  for (int i = threadIdx.x; i < chunks; i += blockDim.x) x_shared[i] = reinterpret_cast<const uint4*>(x)[i];
  __syncthreads();
  if (blockIdx.x * kWarps + warp >= n) return;
  float acc = 0.0f;
  for (int c0 = lane; c0 < chunks; c0 += 32 * kUnroll) {
    uint4 next[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int c = c0 + 32 * (kUnroll + u);
      next[u] = c < chunks ? __ldg(w + c) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int c = c0 + 32 * u;
      if (c >= chunks) break;
      float wf[8], xf[8];
      load_f32x8(reinterpret_cast<const __nv_bfloat16*>(&loaded[u]), wf);
      load_f32x8(reinterpret_cast<const __nv_bfloat16*>(&x_shared[c]), xf);
#pragma unroll
      for (int j = 0; j < 8; ++j) acc += wf[j] * xf[j];
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) loaded[u] = next[u];
  }
  acc = warp_sum(acc);
  if (lane == 0) out[row] = __float2bfloat16(acc + (bias ? __bfloat162float(bias[row]) : 0.0f));
}

}  // namespace

bool gemv_supports(int64_t m, int64_t n, int64_t k) {
  return m == 1 && n > 0 && n < (int64_t{1} << 31) && k > 0 && k % 8 == 0 &&
         static_cast<size_t>(k) * sizeof(__nv_bfloat16) <= kMaxSharedBytes;
}

void launch_gemv(const __nv_bfloat16* x, const __nv_bfloat16* weight, const __nv_bfloat16* bias,
                 __nv_bfloat16* out, int m, int n, int k, cudaStream_t stream) {
  if (!gemv_supports(m, n, k)) {
    throw std::invalid_argument("gemv: [" + std::to_string(m) + ", " + std::to_string(k) + "] x [" +
                                std::to_string(n) + ", " + std::to_string(k) + "]^T is outside the kernel's shapes");
  }
  launch_dependent("gemv", gemv_kernel, (n + kWarps - 1) / kWarps, kWarps * 32, k * sizeof(__nv_bfloat16), stream, x,
                   weight, bias, out, n, k);
}

}  // namespace tern::kernels
