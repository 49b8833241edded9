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

// x_shared <- rms_norm(x + addend) * norm_weight, as the rms_norm kernel computes it; `first_weight` is this
// thread's first chunk of the norm weight, loaded before the wait.
__device__ void normalize_into(const GemvParams& p, uint4* x_shared, const float (&first_weight)[8]) {
  const int chunks = p.k / 8;
  float sum_sq = 0.0f;
  for (int i = threadIdx.x; i < chunks; i += blockDim.x) {
    float v[8];
    load_f32x8(p.x + 8 * i, v);
    if (p.addend) {
      float a[8];
      load_f32x8(p.addend + 8 * i, a);
      Bf16x8 stored;
#pragma unroll
      for (int j = 0; j < 4; ++j) stored.pair[j] = __floats2bfloat162_rn(a[2 * j] + v[2 * j], a[2 * j + 1] + v[2 * j + 1]);
      if (blockIdx.x == 0) *reinterpret_cast<Bf16x8*>(p.residual_out + 8 * i) = stored;
      load_f32x8(reinterpret_cast<const __nv_bfloat16*>(&stored), v);  // the residual as stored (bf16)
    }
    store_f32x8(reinterpret_cast<__nv_bfloat16*>(&x_shared[i]), v);
#pragma unroll
    for (int j = 0; j < 8; ++j) sum_sq += v[j] * v[j];
  }
  const float scale = rsqrtf(block_sum<kWarps>(sum_sq) / p.k + p.eps);
  for (int i = threadIdx.x; i < chunks; i += blockDim.x) {
    float v[8], w[8];
    load_f32x8(reinterpret_cast<const __nv_bfloat16*>(&x_shared[i]), v);
    if (i == threadIdx.x) {
#pragma unroll
      for (int j = 0; j < 8; ++j) w[j] = first_weight[j];
    } else {
      load_f32x8(p.norm_weight + 8 * i, w);
    }
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = v[j] * scale * w[j];
    store_f32x8(reinterpret_cast<__nv_bfloat16*>(&x_shared[i]), v);
  }
}

// Launched as a programmatic dependent: each warp loads the first kUnroll chunks of its weight row (constants), and
// with Norm each thread its first chunk of the norm weight, before waiting for the kernel that writes x, so the
// start of the weight stream overlaps that kernel.
template <bool Norm>
__global__ void __launch_bounds__(kWarps * 32) gemv_kernel(const GemvParams p) {
  extern __shared__ uint4 x_shared[];  // x as chunks of 8 bf16
  const int chunks = p.k / 8;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int row = min(blockIdx.x * kWarps + warp, p.n - 1);  // a past-the-end warp still loads x for its block
  const uint4* w = reinterpret_cast<const uint4*>(p.weight + static_cast<int64_t>(row) * p.k);
  uint4 loaded[kUnroll];
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const int c = lane + 32 * u;
    loaded[u] = c < chunks ? __ldg(w + c) : make_uint4(0, 0, 0, 0);
  }
  float first_norm_weight[8] = {};
  if constexpr (Norm) {
    if (static_cast<int>(threadIdx.x) < chunks) load_f32x8(p.norm_weight + 8 * threadIdx.x, first_norm_weight);
  }
  wait_for_prior_grids();
  allow_dependent_grids();
  if constexpr (Norm) {
    normalize_into(p, x_shared, first_norm_weight);
  } else {
    for (int i = threadIdx.x; i < chunks; i += blockDim.x) x_shared[i] = reinterpret_cast<const uint4*>(p.x)[i];
  }
  __syncthreads();
  if (blockIdx.x * kWarps + warp >= p.n) return;
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
  if (lane == 0) p.out[row] = __float2bfloat16(acc + (p.bias ? __bfloat162float(p.bias[row]) : 0.0f));
}

}  // namespace

bool gemv_supports(int64_t m, int64_t n, int64_t k) {
  return m == 1 && n > 0 && n < (int64_t{1} << 31) && k > 0 && k % 8 == 0 &&
         static_cast<size_t>(k) * sizeof(__nv_bfloat16) <= kMaxSharedBytes;
}

void launch_gemv(const GemvParams& p, cudaStream_t stream) {
  if (!gemv_supports(1, p.n, p.k)) {
    throw std::invalid_argument("gemv: [1, " + std::to_string(p.k) + "] x [" + std::to_string(p.n) + ", " +
                                std::to_string(p.k) + "]^T is outside the kernel's shapes");
  }
  if (p.norm_weight && p.addend && !p.residual_out) throw std::invalid_argument("gemv: an addend needs residual_out");
  const unsigned blocks = (p.n + kWarps - 1) / kWarps;
  const size_t shared_bytes = p.k * sizeof(__nv_bfloat16);
  if (p.norm_weight) {
    launch_dependent("gemv", gemv_kernel<true>, blocks, kWarps * 32, shared_bytes, stream, p);
  } else {
    launch_dependent("gemv", gemv_kernel<false>, blocks, kWarps * 32, shared_bytes, stream, p);
  }
}

}  // namespace tern::kernels
