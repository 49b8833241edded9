#pragma once
// Split-KV ("flash-decoding") paged attention for query tokens that attend over long contexts with few new
// tokens each (decode, speculative verification, short chunks). Each work item is one query token and one
// chunk of its keys; a second kernel merges the chunks by their log-sum-exp and adds the attention sinks.
// Any token can go through this path: each query sees keys [window start, its position] of its sequence.
#include <cuda_runtime.h>

#include "attention/paged_kv.h"

namespace tern::kernels {

struct DecodeAttentionParams {
  const __nv_bfloat16* query = nullptr;  // [num_tokens, num_heads, head_dim]
  __nv_bfloat16* out = nullptr;          // [num_tokens, num_heads, head_dim]
  PagedKv kv;
  AttentionBatch batch;
  AttentionShape shape;

  // The plan, made once per step: items sorted by token, chunk c of a token covering key positions
  // [c * chunk_tokens, (c + 1) * chunk_tokens).
  const int32_t* item_token = nullptr;  // [num_items]
  const int32_t* item_chunk = nullptr;  // [num_items]
  int num_items = 0;
  int chunk_tokens = 0;
  const int32_t* tokens = nullptr;            // [num_decode_tokens]: token rows this launch computes
  const int32_t* token_item_begin = nullptr;  // [num_decode_tokens + 1]: each token's items
  int num_decode_tokens = 0;

  float* partial_out = nullptr;  // workspace [num_items, num_heads, head_dim]
  float* partial_lse = nullptr;  // workspace [num_items, num_heads], log2 domain
};

// Head sizes and GQA group sizes (query heads per KV head) this kernel is built for.
bool decode_attention_supports(int head_dim, int group_size);

// Throws std::invalid_argument on shapes it does not support.
void launch_decode_attention(const DecodeAttentionParams& params, cudaStream_t stream);

template <int HeadDim>
void launch_decode_attention_chunks(const DecodeAttentionParams& params, cudaStream_t stream);

}  // namespace tern::kernels
