#pragma once
// The second half of split-KV attention (decode_attention, mla_attention): a decode token's keys were attended in
// shares, each into a float32 partial output with its log-sum-exp; this merges a token's shares by their
// log-sum-exps, adds the softmax mass of an attention sink where a head has one, and writes the bf16 output.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace tern::kernels {

constexpr int kMergeMaxShares = 128;
constexpr int kMergeMaxValueDim = 576;

struct MergeSharesParams {
  const float* partial_out = nullptr;  // [num_items, num_heads, value_dim]
  const float* partial_lse = nullptr;  // [num_items, num_heads], log2 domain; -inf for a share without keys
  const float* sinks = nullptr;        // [num_heads] sink logits, or null
  __nv_bfloat16* out = nullptr;        // [num_tokens, num_heads, value_dim]
  // Decode context parallelism (partial attention over a rank's share of the keys): with both set, the output
  // goes to out_f32 [num_tokens, num_heads, value_dim] float32 instead of `out`, and each (token, head)'s
  // log-sum-exp of scores, natural log, to out_lse [num_tokens, num_heads] (-inf where no share had keys).
  float* out_f32 = nullptr;
  float* out_lse = nullptr;
  const int32_t* tokens = nullptr;            // [num_decode_tokens]: each decode token's output row
  const int32_t* token_item_begin = nullptr;  // [num_decode_tokens + 1]: each token's shares (items)
  int num_decode_tokens = 0;
  int num_heads = 0;
  int value_dim = 0;
};

// Launched as a programmatic dependent of the kernel that wrote the shares (kernels/common/dependent_launch.cuh).
// Throws std::invalid_argument for value dims that are not a multiple of 4 or above kMergeMaxValueDim.
void launch_merge_shares(const MergeSharesParams& params, cudaStream_t stream);

}  // namespace tern::kernels
