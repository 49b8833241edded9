#pragma once
// Split-KV ("flash-decoding") paged attention for query tokens that attend over long contexts with few new
// tokens each (decode, speculative verification, short chunks). Each work item is one query token and one
// chunk of its keys; a second kernel merges the chunks by their log-sum-exp and adds the attention sinks
// (merge_shares.h), unless there is nothing to merge (DecodeAttentionParams::shares_are_outputs).
// Any token can go through this path: each query sees keys [window start, its position] of its sequence.
#include <cuda_runtime.h>

#include "attention/merge_shares.h"
#include "attention/paged_kv.h"

namespace tern::kernels {

struct DecodeAttentionParams {
  const __nv_bfloat16* query = nullptr;  // [num_tokens, num_heads, head_dim]
  __nv_bfloat16* out = nullptr;          // [num_tokens, num_heads, head_dim]
  PagedKv kv;
  AttentionBatch batch;
  AttentionShape shape;
  // Whether `batch` is step metadata copied from the host (not written by a kernel of the step), so that the
  // kernel may read it, and the KV rows cached before the step, before waiting for the kernel before it
  // (dependent_launch.cuh).
  bool batch_from_host = true;

  // The plan, made once per step: items sorted by token, each token's keys (its window) cut into num_splits
  // shares of whole key tiles (64 keys, 32 on the CUDA-core kernel); item_chunk is the share's index. Shares past
  // the keys are empty (weight 0), so a recorded graph replays at any context length that plans the same
  // number of shares (decode_attention_num_splits).
  const int32_t* item_token = nullptr;  // [num_items]
  const int32_t* item_chunk = nullptr;  // [num_items]
  int num_items = 0;
  int num_splits = 1;
  const int32_t* tokens = nullptr;            // [num_decode_tokens]: token rows this launch computes
  const int32_t* token_item_begin = nullptr;  // [num_decode_tokens + 1]: each token's items
  int num_decode_tokens = 0;

  float* partial_out = nullptr;  // workspace [num_items, num_heads, head_dim]
  float* partial_lse = nullptr;  // workspace [num_items, num_heads], log2 domain

  // Decode context parallelism: float32 output and log-sum-exp in place of `out` (MergeSharesParams).
  float* out_f32 = nullptr;
  float* out_lse = nullptr;

  // One share per token and nothing to merge in (no sinks, no log-sum-exp asked for): the share kernel writes the
  // bf16 output itself and no merge runs (batch-128 decode on the 8B model spent 6.8 us a layer in a merge that
  // only copied).
  __host__ __device__ bool shares_are_outputs() const {
    return num_splits == 1 && shape.sinks == nullptr && out_f32 == nullptr;
  }
};

// Shares per token for `num_tokens` decode tokens whose longest context (keys of one token) is `max_keys`: as
// many blocks (token x share x KV head) as fit on `num_sms` SMs at once (the tensor-core kernel holds three blocks
// per SM for head_dim 128, more for 64), rounded down so that the launch is one full wave rather than a wave and a
// sliver (on the H200, 320 blocks where 264 fit ran at 43% of copy bandwidth, 256 blocks at 58%), at most
// kDecodeMaxSplits (the combine reads every share). Short contexts take fewer: one share per kDecodeShareKeys keys,
// rounded up to a power of two so that one recorded graph serves a range of lengths. Empty shares were not free:
// batch-1 decode of the 8B model at 128-384 keys ran at 231.2 tok/s with 8 shares, 228.1 with 49.
constexpr int kDecodeMaxSplits = kMergeMaxShares;
constexpr int kDecodeBlocksPerSm = 3;
constexpr int kDecodeShareKeys = 64;  // the tensor-core kernel's key tile
inline int decode_attention_num_splits(int num_tokens, int num_kv_heads, int num_sms, int64_t max_keys) {
  const int tokens_heads = num_tokens * num_kv_heads > 0 ? num_tokens * num_kv_heads : 1;
  const int full_wave = num_sms * kDecodeBlocksPerSm / tokens_heads;
  int splits = full_wave < 1 ? 1 : (full_wave > kDecodeMaxSplits ? kDecodeMaxSplits : full_wave);
  int by_keys = 1;
  while (by_keys < splits && static_cast<int64_t>(by_keys) * kDecodeShareKeys < max_keys) by_keys *= 2;
  return by_keys < splits ? by_keys : splits;
}

// Head sizes and GQA group sizes (query heads per KV head) this kernel is built for.
bool decode_attention_supports(int head_dim, int group_size);

// Throws std::invalid_argument on shapes it does not support.
void launch_decode_attention(const DecodeAttentionParams& params, cudaStream_t stream);

// The per-share kernels: tensor cores for head_dim 64 and 128 (decode_attention_mma_kernel.cuh), CUDA cores for
// the other head sizes (decode_attention_kernel.cuh).
template <int HeadDim>
void launch_decode_attention_mma(const DecodeAttentionParams& params, cudaStream_t stream);
template <int HeadDim>
void launch_decode_attention_chunks(const DecodeAttentionParams& params, cudaStream_t stream);

}  // namespace tern::kernels
