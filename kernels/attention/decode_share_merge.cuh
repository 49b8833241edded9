#pragma once
// The merge of a decode token's key shares, run by whichever share block of a (token, KV head) finishes last,
// instead of by a second kernel: at batch 1 a separate merge kernel's launch and memory round trip cost as much
// as the shares' own work. Each block counts itself in params.split_arrivals (zeros when the launch starts; the
// last block puts its counter back to zero for the next launch) after its partial results are visible
// device-wide, so the last one reads every share's.
#include <cmath>

#include "attention/decode_attention.h"
#include "common/device_math.cuh"

namespace tern::kernels::decode_merge {

constexpr float kLog2e = 1.4426950408889634f;

// Floats of shared memory the merge needs; the share kernel's tiles are free by then.
template <int HeadDim, int Warps>
constexpr size_t scratch_bytes() {
  return (kDecodeMaxSplits + Warps * HeadDim) * sizeof(float);
}

// out = sum_c w_c * out_c / (sum_c w_c + sink weight), w_c = 2^(lse_c - max), for each query head of the KV
// head's group. Warp 0 turns the shares' log-sum-exps into normalized weights; then warp w sums shares w, w + Warps,
// ... over 16-byte chunks of the head, and the warps' sums are added in shared memory. Partials of other blocks
// are read past L1 (__ldcg), which is not coherent between blocks.
template <int HeadDim, int Warps>
__device__ __noinline__ void merge_if_last_share(const DecodeAttentionParams& p, int item, int kv_head, float* scratch) {
  __shared__ bool last;
  __threadfence();  // this block's partial results, before its arrival is counted
  __syncthreads();
  const int t = item / p.num_splits;  // items are token-major: item = t * num_splits + share
  if (threadIdx.x == 0) {
    int* arrivals = p.split_arrivals + t * p.shape.num_kv_heads + kv_head;
    last = atomicAdd(arrivals, 1) == p.num_splits - 1;
    if (last) *arrivals = 0;
  }
  __syncthreads();
  if (!last) return;
  __threadfence();

  float* weights = scratch;                                   // [kDecodeMaxSplits]
  float* sums = scratch + kDecodeMaxSplits;                   // [Warps][HeadDim]
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int num_heads = p.shape.num_heads;
  const int group = num_heads / p.shape.num_kv_heads;
  const int token = p.tokens[t];
  const int begin = t * p.num_splits;
  const int count = p.num_splits;
  const int64_t item_stride = static_cast<int64_t>(num_heads) * HeadDim;
  for (int head = kv_head * group; head < (kv_head + 1) * group; ++head) {
    if (warp == 0) {
      const float sink = p.shape.sinks ? p.shape.sinks[head] * kLog2e : -INFINITY;
      float max_lse = sink;
      for (int c = lane; c < count; c += 32) max_lse = fmaxf(max_lse, __ldcg(&p.partial_lse[(begin + c) * num_heads + head]));
      max_lse = warp_max(max_lse);
      const float shift = max_lse == -INFINITY ? 0.0f : max_lse;
      float denominator = 0.0f;
      for (int c = lane; c < count; c += 32) {
        const float w = exp2f(__ldcg(&p.partial_lse[(begin + c) * num_heads + head]) - shift);
        weights[c] = w;
        denominator += w;
      }
      denominator = warp_sum(denominator) + (p.shape.sinks ? exp2f(sink - shift) : 0.0f);
      const float inv = denominator > 0.0f ? 1.0f / denominator : 0.0f;
      __syncwarp();
      for (int c = lane; c < count; c += 32) weights[c] *= inv;
    }
    __syncthreads();
    const float* partial = p.partial_out + (static_cast<int64_t>(begin) * num_heads + head) * HeadDim;
    for (int j = lane; j < HeadDim / 4; j += 32) {
      float4 sum = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll 4
      for (int c = warp; c < count; c += Warps) {
        const float w = weights[c];
        const float4 v = __ldcg(reinterpret_cast<const float4*>(partial + c * item_stride + 4 * j));
        sum.x += w * v.x;
        sum.y += w * v.y;
        sum.z += w * v.z;
        sum.w += w * v.w;
      }
      *reinterpret_cast<float4*>(&sums[warp * HeadDim + 4 * j]) = sum;
    }
    __syncthreads();
    for (int d = threadIdx.x; d < HeadDim; d += blockDim.x) {
      float total = 0.0f;
#pragma unroll
      for (int w = 0; w < Warps; ++w) total += sums[w * HeadDim + d];
      p.out[(static_cast<int64_t>(token) * num_heads + head) * HeadDim + d] = __float2bfloat16(total);
    }
    __syncthreads();  // weights and sums are rewritten for the next head
  }
}

}  // namespace tern::kernels::decode_merge
