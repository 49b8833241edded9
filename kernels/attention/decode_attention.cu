#include <stdexcept>
#include <string>

#include "attention/decode_attention.h"
#include "common/dependent_launch.cuh"
#include "common/device_math.cuh"

namespace tern::kernels {

namespace {

constexpr int kMaxGroup = 16;
constexpr int kMaxCombineHeadDim = 256;
constexpr float kLog2e = 1.4426950408889634f;

constexpr int kCombineWarps = 4;

// Merges a token's shares: out = sum_c w_c * out_c / (sum_c w_c + sink weight), w_c = 2^(lse_c - max). Warp 0
// turns the shares' log-sum-exps into normalized weights; then warp w sums shares w, w + 4, ... over 16-byte
// chunks of the head (all of a warp's loads independent, so that they overlap), and the warps' sums are added in
// shared memory. Launched as a programmatic dependent of the share kernel, as every kernel of a decode step is.
__global__ void __launch_bounds__(kCombineWarps * 32) combine_kernel(const DecodeAttentionParams p) {
  __shared__ float weights[kDecodeMaxSplits];
  __shared__ __align__(16) float sums[kCombineWarps][kMaxCombineHeadDim];
  wait_for_prior_grids();
  allow_dependent_grids();
  const int i = blockIdx.x;
  const int head = blockIdx.y;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int token = p.tokens[i];
  const int begin = p.token_item_begin[i];
  const int count = p.token_item_begin[i + 1] - begin;
  const int num_heads = p.shape.num_heads;
  const int head_dim = p.shape.head_dim;

  if (warp == 0) {
    const float sink = p.shape.sinks ? p.shape.sinks[head] * kLog2e : -INFINITY;
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
    denominator = warp_sum(denominator) + (p.shape.sinks ? exp2f(sink - shift) : 0.0f);
    const float inv = denominator > 0.0f ? 1.0f / denominator : 0.0f;
    __syncwarp();
    for (int c = lane; c < count; c += 32) weights[c] *= inv;
  }
  __syncthreads();

  const float* partial = p.partial_out + (static_cast<int64_t>(begin) * num_heads + head) * head_dim;
  const int64_t item_stride = static_cast<int64_t>(num_heads) * head_dim;
  for (int j = lane; j < head_dim / 4; j += 32) {
    float4 sum = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll 4
    for (int c = warp; c < count; c += kCombineWarps) {
      const float w = weights[c];
      if (w == 0.0f) continue;  // a share past the keys (short contexts leave most of them empty)
      const float4 v = *reinterpret_cast<const float4*>(partial + c * item_stride + 4 * j);
      sum.x += w * v.x;
      sum.y += w * v.y;
      sum.z += w * v.z;
      sum.w += w * v.w;
    }
    *reinterpret_cast<float4*>(&sums[warp][4 * j]) = sum;
  }
  __syncthreads();
  for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
    float total = 0.0f;
#pragma unroll
    for (int w = 0; w < kCombineWarps; ++w) total += sums[w][d];
    p.out[(static_cast<int64_t>(token) * num_heads + head) * head_dim + d] = __float2bfloat16(total);
  }
}

}  // namespace

bool decode_attention_supports(int head_dim, int group_size) {
  const bool dim_ok = head_dim == 16 || head_dim == 32 || head_dim == 64 || head_dim == 128 || head_dim == 256;
  return dim_ok && group_size >= 1 && group_size <= kMaxGroup;
}

void launch_decode_attention(const DecodeAttentionParams& params, cudaStream_t stream) {
  const AttentionShape& s = params.shape;
  if (s.num_kv_heads <= 0 || s.num_heads % s.num_kv_heads != 0) {
    throw std::invalid_argument("decode attention: " + std::to_string(s.num_heads) + " heads are not a multiple of " +
                                std::to_string(s.num_kv_heads) + " KV heads");
  }
  if (!decode_attention_supports(s.head_dim, s.num_heads / s.num_kv_heads)) {
    throw std::invalid_argument("decode attention: head_dim " + std::to_string(s.head_dim) + " with " +
                                std::to_string(s.num_heads / s.num_kv_heads) +
                                " query heads per KV head is not built (head_dim 16/32/64/128/256, groups up to 16)");
  }
  if (params.num_splits < 1 || params.num_splits > kDecodeMaxSplits) {
    throw std::invalid_argument("decode attention: num_splits " + std::to_string(params.num_splits) +
                                " is outside [1, " + std::to_string(kDecodeMaxSplits) + "]");
  }
  if (params.num_items == 0) return;
  switch (s.head_dim) {
    case 16: launch_decode_attention_chunks<16>(params, stream); break;
    case 32: launch_decode_attention_chunks<32>(params, stream); break;
    case 64: launch_decode_attention_mma<64>(params, stream); break;
    case 128: launch_decode_attention_mma<128>(params, stream); break;
    default: launch_decode_attention_chunks<256>(params, stream); break;
  }
  launch_dependent("decode attention (combine)", combine_kernel, dim3(params.num_decode_tokens, s.num_heads),
                   kCombineWarps * 32, 0, stream, params);
}

}  // namespace tern::kernels
