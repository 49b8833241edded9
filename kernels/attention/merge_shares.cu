#include <stdexcept>
#include <string>

#include "attention/merge_shares.h"
#include "common/dependent_launch.cuh"
#include "common/device_math.cuh"

namespace tern::kernels {

namespace {

constexpr int kWarps = 4;
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// One block per (decode token, head): out = sum_c w_c * out_c / (sum_c w_c + sink weight), w_c = 2^(lse_c - max).
// Warp 0 turns the shares' log-sum-exps into normalized weights; then warp w sums shares w, w + 4, ... over 16-byte
// chunks of the head (all of a warp's loads independent, so that they overlap), skipping shares of weight 0 (past
// the keys: short contexts leave most of them empty), and the warps' sums are added in shared memory.
// WithLse: the partial attention of decode context parallelism (float32 output and the log-sum-exp).
template <bool WithLse>
__global__ void __launch_bounds__(kWarps * 32) merge_shares_kernel(const MergeSharesParams p) {
  __shared__ float weights[kMergeMaxShares];
  __shared__ __align__(16) float sums[kWarps][kMergeMaxValueDim];
  const int i = blockIdx.x;
  const int head = blockIdx.y;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int token = p.tokens[i];  // the split plan, step metadata: read before the wait
  const int begin = p.token_item_begin[i];
  const int count = p.token_item_begin[i + 1] - begin;
  wait_for_prior_grids();
  allow_dependent_grids();
  const int num_heads = p.num_heads;
  const int value_dim = p.value_dim;

  if (warp == 0) {
    const float sink = p.sinks ? p.sinks[head] * kLog2e : -INFINITY;
    float max_lse = sink;
    for (int c = lane; c < count; c += 32) max_lse = fmaxf(max_lse, p.partial_lse[(begin + c) * num_heads + head]);
    max_lse = warp_max(max_lse);
    const float shift = max_lse == -INFINITY ? 0.0f : max_lse;
    float denominator = 0.0f;
    for (int c = lane; c < count; c += 32) {
      const float w = exp2f(p.partial_lse[(begin + c) * num_heads + head] - shift);
      weights[c] = w;
      denominator += w;
    }
    denominator = warp_sum(denominator) + (p.sinks ? exp2f(sink - shift) : 0.0f);
    const float inv = denominator > 0.0f ? 1.0f / denominator : 0.0f;
    if (WithLse && lane == 0) {
      p.out_lse[static_cast<int64_t>(token) * num_heads + head] =
          denominator > 0.0f ? (shift + log2f(denominator)) * kLn2 : -INFINITY;
    }
    __syncwarp();
    for (int c = lane; c < count; c += 32) weights[c] *= inv;
  }
  __syncthreads();

  const float* partial = p.partial_out + (static_cast<int64_t>(begin) * num_heads + head) * value_dim;
  const int64_t item_stride = static_cast<int64_t>(num_heads) * value_dim;
  for (int j = lane; j < value_dim / 4; j += 32) {
    float4 sum = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll 4
    for (int c = warp; c < count; c += kWarps) {
      const float w = weights[c];
      if (w == 0.0f) continue;
      const float4 v = *reinterpret_cast<const float4*>(partial + c * item_stride + 4 * j);
      sum.x += w * v.x;
      sum.y += w * v.y;
      sum.z += w * v.z;
      sum.w += w * v.w;
    }
    *reinterpret_cast<float4*>(&sums[warp][4 * j]) = sum;
  }
  __syncthreads();
  for (int d = threadIdx.x; d < value_dim; d += blockDim.x) {
    float total = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) total += sums[w][d];
    const int64_t at = (static_cast<int64_t>(token) * num_heads + head) * value_dim + d;
    if (WithLse) {
      p.out_f32[at] = total;
    } else {
      p.out[at] = __float2bfloat16(total);
    }
  }
}

}  // namespace

void launch_merge_shares(const MergeSharesParams& params, cudaStream_t stream) {
  if (params.value_dim <= 0 || params.value_dim % 4 != 0 || params.value_dim > kMergeMaxValueDim) {
    throw std::invalid_argument("merge of attention shares: value_dim " + std::to_string(params.value_dim) +
                                " is not a multiple of 4 up to " + std::to_string(kMergeMaxValueDim));
  }
  if ((params.out_f32 == nullptr) != (params.out_lse == nullptr)) {
    throw std::invalid_argument("merge of attention shares: the float32 output and the log-sum-exps come together");
  }
  if (params.num_decode_tokens == 0) return;
  const dim3 grid(params.num_decode_tokens, params.num_heads);
  if (params.out_lse) {
    launch_dependent("merge of attention shares", merge_shares_kernel<true>, grid, kWarps * 32, 0, stream, params);
  } else {
    launch_dependent("merge of attention shares", merge_shares_kernel<false>, grid, kWarps * 32, 0, stream, params);
  }
}

}  // namespace tern::kernels
