#include <stdexcept>
#include <string>

#include "attention/mla_attention.h"
#include "common/device_math.cuh"

namespace tern::kernels {

namespace {

constexpr int kCombineThreads = 128;

// Merges a decode token's shares for one head: out = sum_c w_c * out_c / sum_c w_c, w_c = 2^(lse_c - max lse).
// Warp 0 turns the shares' log-sum-exps into normalized weights; then each thread sums its value dims.
__global__ void __launch_bounds__(kCombineThreads) combine_kernel(const MlaAttentionParams p) {
  __shared__ float weights[kDecodeMaxSplits];
  const int i = blockIdx.x;
  const int head = blockIdx.y;
  const int token = p.tokens[i];
  const int begin = p.token_item_begin[i];
  const int count = p.token_item_begin[i + 1] - begin;
  const int num_heads = p.num_heads;
  if (threadIdx.x < 32) {
    const int lane = threadIdx.x;
    float max_lse = -INFINITY;
    for (int c = lane; c < count; c += 32) max_lse = fmaxf(max_lse, p.partial_lse[(begin + c) * num_heads + head]);
    max_lse = warp_max(max_lse);
    const float shift = max_lse == -INFINITY ? 0.0f : max_lse;
    float denominator = 0.0f;
    for (int c = lane; c < count; c += 32) {
      const float w = exp2f(p.partial_lse[(begin + c) * num_heads + head] - shift);
      weights[c] = w;
      denominator += w;
    }
    denominator = warp_sum(denominator);
    const float inv = denominator > 0.0f ? 1.0f / denominator : 0.0f;
    __syncwarp();
    for (int c = lane; c < count; c += 32) weights[c] *= inv;
  }
  __syncthreads();
  const int64_t item_stride = static_cast<int64_t>(num_heads) * p.value_dim;
  const float* partial = p.partial_out + (static_cast<int64_t>(begin) * num_heads + head) * p.value_dim;
  for (int d = threadIdx.x; d < p.value_dim; d += blockDim.x) {
    float total = 0.0f;
    for (int c = 0; c < count; ++c) total += weights[c] * partial[c * item_stride + d];
    p.out[(static_cast<int64_t>(token) * num_heads + head) * p.value_dim + d] = __float2bfloat16(total);
  }
}

void check(bool ok, const std::string& what) {
  if (!ok) throw std::invalid_argument("MLA attention: " + what);
}

}  // namespace

bool mla_attention_supports(int key_dim, int value_dim) {
  return key_dim > 0 && key_dim % 8 == 0 && key_dim <= kMlaMaxKeyDim && value_dim > 0 && value_dim % 8 == 0 &&
         value_dim <= key_dim;
}

void launch_mla_attention(const MlaAttentionParams& params, cudaStream_t stream) {
  check(mla_attention_supports(params.key_dim, params.value_dim),
        "key_dim " + std::to_string(params.key_dim) + " and value_dim " + std::to_string(params.value_dim) +
            " are not built (multiples of 8, value_dim <= key_dim <= " + std::to_string(kMlaMaxKeyDim) + ")");
  check(params.num_heads > 0, "num_heads " + std::to_string(params.num_heads) + " is not positive");
  check(params.kv.block_size > 0, "block size " + std::to_string(params.kv.block_size) + " is not positive");
  check(params.num_splits >= 1 && params.num_splits <= kDecodeMaxSplits,
        "num_splits " + std::to_string(params.num_splits) + " is outside [1, " + std::to_string(kDecodeMaxSplits) +
            "]");
  check(params.num_items == 0 || (params.partial_out && params.partial_lse), "decode items need the workspace");
  const auto launch_tiles = [&](bool split) {
    if (params.value_dim <= 128) {
      launch_mla_attention_tiles<128>(params, split, stream);
    } else if (params.value_dim <= 512) {
      launch_mla_attention_tiles<512>(params, split, stream);
    } else {
      launch_mla_attention_tiles<576>(params, split, stream);
    }
  };
  if (params.num_tiles > 0) launch_tiles(false);
  if (params.num_items == 0) return;
  launch_tiles(true);
  combine_kernel<<<dim3(params.num_decode_tokens, params.num_heads), kCombineThreads, 0, stream>>>(params);
}

}  // namespace tern::kernels
