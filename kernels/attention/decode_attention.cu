#include <stdexcept>
#include <string>

#include "attention/decode_attention.h"
#include "common/device_math.cuh"

namespace tern::kernels {

namespace {

constexpr int kMaxGroup = 16;
constexpr float kLog2e = 1.4426950408889634f;

// Merges a token's chunks: out = sum_c w_c * out_c / (sum_c w_c + sink weight), w_c = 2^(lse_c - max).
__global__ void combine_kernel(const DecodeAttentionParams p) {
  const int i = blockIdx.x;
  const int head = blockIdx.y;
  const int token = p.tokens[i];
  const int begin = p.token_item_begin[i];
  const int end = p.token_item_begin[i + 1];
  const int num_heads = p.shape.num_heads;
  const int head_dim = p.shape.head_dim;
  const float sink = p.shape.sinks ? p.shape.sinks[head] * kLog2e : -INFINITY;

  float max_lse = sink;
  for (int item = begin; item < end; ++item) max_lse = fmaxf(max_lse, p.partial_lse[item * num_heads + head]);
  const float shift = max_lse == -INFINITY ? 0.0f : max_lse;
  float denominator = p.shape.sinks ? exp2f(sink - shift) : 0.0f;
  for (int item = begin; item < end; ++item) denominator += exp2f(p.partial_lse[item * num_heads + head] - shift);
  const float inv = denominator > 0.0f ? 1.0f / denominator : 0.0f;

  for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
    float sum = 0.0f;
    for (int item = begin; item < end; ++item) {
      const float w = exp2f(p.partial_lse[item * num_heads + head] - shift);
      sum += w * p.partial_out[(static_cast<int64_t>(item) * num_heads + head) * head_dim + d];
    }
    p.out[(static_cast<int64_t>(token) * num_heads + head) * head_dim + d] = __float2bfloat16(sum * inv);
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
  if (params.num_splits < 1) throw std::invalid_argument("decode attention: num_splits must be at least 1");
  if (params.num_items == 0) return;
  switch (s.head_dim) {
    case 16: launch_decode_attention_chunks<16>(params, stream); break;
    case 32: launch_decode_attention_chunks<32>(params, stream); break;
    case 64: launch_decode_attention_chunks<64>(params, stream); break;
    case 128: launch_decode_attention_chunks<128>(params, stream); break;
    default: launch_decode_attention_chunks<256>(params, stream); break;
  }
  const dim3 grid(params.num_decode_tokens, s.num_heads);
  combine_kernel<<<grid, s.head_dim >= 128 ? 128 : s.head_dim, 0, stream>>>(params);
}

}  // namespace tern::kernels
