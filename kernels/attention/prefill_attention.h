#pragma once
// Paged prefill attention (bf16 tensor cores, float32 softmax and accumulators): causal, GQA, sliding window,
// attention sinks, variable-length sequences with cached context, all sequences in one launch. Work is a list of
// query tiles of kPrefillTileRows rows, planned once per step. The kernel is built on Hopper's wgmma
// (FlashAttention-3-style, prefill_attention_wgmma_kernel.cuh); it replaced a FlashAttention-2-style mma.sync
// kernel that reached 203 TFLOP/s where it reaches 462 (docs/BENCHMARKS.md).
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

// The kernel itself, for head_dim 64 or 128 (no checks).
template <int HeadDim>
void launch_prefill_attention_wgmma(const PrefillAttentionParams& params, cudaStream_t stream);

}  // namespace tern::kernels
