#pragma once
// FlashAttention-2-style paged prefill attention (bf16 tensor-core mma.sync, float32 softmax and accumulators):
// causal, GQA, sliding window, attention sinks, variable-length sequences with cached context, all sequences in
// one launch. Work is a list of query tiles of kPrefillTileRows rows, planned once per step.
#include <cuda_runtime.h>

#include "attention/paged_kv.h"

namespace tern::kernels {

constexpr int kPrefillTileRows = 128;

struct PrefillAttentionParams {
  const __nv_bfloat16* query = nullptr;  // [num_tokens, num_heads, head_dim]
  __nv_bfloat16* out = nullptr;          // [num_tokens, num_heads, head_dim]
  PagedKv kv;
  AttentionBatch batch;
  AttentionShape shape;
  const int32_t* tile_seq = nullptr;  // [num_tiles]: sequence of each query tile
  const int32_t* tile_row = nullptr;  // [num_tiles]: first new-token row of the tile within its sequence
  int num_tiles = 0;
};

bool prefill_attention_supports(int head_dim);

// Throws std::invalid_argument on shapes it does not support.
void launch_prefill_attention(const PrefillAttentionParams& params, cudaStream_t stream);

template <int HeadDim>
void launch_prefill_attention_tiles(const PrefillAttentionParams& params, cudaStream_t stream);

}  // namespace tern::kernels
