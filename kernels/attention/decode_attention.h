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
  // shares of whole key tiles (64 keys, 32 on the CUDA-core kernel; key_shares.h); item_chunk is the share's
  // index. With fewer tiles than shares some shares are empty (weight 0), so a recorded graph replays at any
  // context length that plans the same number of shares (decode_attention_num_splits).
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

  // The plan's kernel (DecodeAttentionPlan): one block per item for all KV heads, where the layer's shape has it
  // (decode_attention_all_heads_supports); otherwise one block per item and KV head, the whole-context kernel
  // where whole_context is set and the cache's blocks are whole pages.
  bool all_heads = false;
  bool whole_context = false;

  // One share per token and nothing to merge in (no sinks, no log-sum-exp asked for): the share kernel writes the
  // bf16 output itself and no merge runs (batch-128 decode on the 8B model spent 6.8 us a layer in a merge that
  // only copied).
  __host__ __device__ bool shares_are_outputs() const {
    return num_splits == 1 && shape.sinks == nullptr && out_f32 == nullptr;
  }
};

// Shares per token for `num_tokens` decode tokens whose longest context (keys of one token) is `max_keys`: two
// blocks (token x share x KV head) per SM on `num_sms` SMs, rounded down so that the launch is one wave rather
// than a wave and a sliver (on the H200, 320 blocks where 264 fit ran at 43% of copy bandwidth, 256 blocks at 58%),
// at most kDecodeMaxSplits (the merge reads every share). The tensor-core kernel holds three blocks per SM for
// head_dim 128, which its row copies need; with page copies, two an SM make longer shares and fewer to merge: on
// the 8B model at 4K context (docs/BENCHMARKS.md) batch 1 decoded 1.7% faster, batch 2 1.4%, batch 4 0.5%, batches
// 8 and 16 0.4-0.8% slower. Short contexts take fewer: one share per kDecodeShareKeys keys,
// rounded up to a power of two so that one recorded graph serves a range of lengths. Empty shares were not free:
// batch-1 decode of the 8B model at 128-384 keys ran at 231.2 tok/s with 8 shares, 228.1 with 49.
constexpr int kDecodeMaxSplits = kMergeMaxShares;
constexpr int kDecodeBlocksPerSm = 2;
constexpr int kDecodeShareKeys = 64;  // the tensor-core kernel's key tile
constexpr int kDecodePageKeys = 16;  // the tensor-core kernel's page copies: one warp's keys of a tile
inline int decode_attention_num_splits(int num_tokens, int num_kv_heads, int num_sms, int64_t max_keys) {
  const int tokens_heads = num_tokens * num_kv_heads > 0 ? num_tokens * num_kv_heads : 1;
  const int full_wave = num_sms * kDecodeBlocksPerSm / tokens_heads;
  int splits = full_wave < 1 ? 1 : (full_wave > kDecodeMaxSplits ? kDecodeMaxSplits : full_wave);
  int by_keys = 1;
  while (by_keys < splits && static_cast<int64_t>(by_keys) * kDecodeShareKeys < max_keys) by_keys *= 2;
  return by_keys < splits ? by_keys : splits;
}

// The decode attention of a step: its kernel and the shares per token. The per-KV-head kernel's blocks are small
// (up to three an SM), each streaming its KV head's keys (pages of 16, or rows where the cache's blocks are not
// whole pages): it reaches the copy bandwidth only with a full wave of them, that is, with num_sms * 2 / (tokens x
// KV heads) shares of long enough contexts. Once a step's tokens x KV heads outnumber the SMs, the plan has one or
// two shares a token and the wave is short of blocks; then one block an SM for all KV heads of a share (2 KB
// copies, a key's rows of every head) streams at the SM's share of the bandwidth: num_sms / tokens shares, where
// every SM gets at least kDecodeAllHeadsMinKeysPerSm keys.
// Measured on the H200 (docs/BENCHMARKS.md, attention_bench), 32 query / 8 KV heads of 128, of the copy bandwidth,
// all heads against per KV head (page copies): batch 32 at 32K keys 97% against 76%, at 4K 89% against 72%, at 1K
// 76% against 69%; batch 64 at 512 keys 73% against 72%, batch 128 94% against 86%; batch 8 at 32K 92% against
// 93%.
constexpr int kDecodeAllHeadsMaxKvHeads = 8;
constexpr int64_t kDecodeAllHeadsMinKeysPerSm = 128;
struct DecodeAttentionPlan {
  int num_splits = 1;
  bool all_heads = false;
  bool whole_context = false;
};
// What the plan needs to know of a model's attention layers, one plan serving every layer of a step.
struct DecodeLayers {
  int num_kv_heads = 1;  // the most of any layer (an MLA layer counts as kMlaDecodeSplitHeads)
  // Every layer can take the whole-context kernel (decode_attention_whole_context_supports), so that the plan may
  // choose it.
  bool whole_context = false;
  // Every layer can take the all-heads kernel, which reads bf16 caches only (an FP8 cache makes this false).
  bool all_heads = true;
};
// Short contexts at few tokens: one share per (token, KV head) holding the whole context, so that nothing is
// merged. Its kernel (8 warps, 3 stages of 128 keys, a block an SM) has every key of up to
// kDecodeWholeContextKeys in flight at once, the ones earlier steps cached before the wait for the q/k/v
// projection. Batch-1 decode of the 8B model at 128-384 keys: 247.8 tok/s against 244.3 with 2-8 shares and their
// merge; 4 warps and 6 stages of 64 keys 246.8 (docs/BENCHMARKS.md).
constexpr int64_t kDecodeWholeContextKeys = 384;
// The all-heads kernel's shares per token: a block an SM, at least one share and at most kDecodeMaxSplits.
inline int decode_attention_all_heads_splits(int num_tokens, int num_sms) {
  const int per_sm = num_tokens > 0 ? num_sms / num_tokens : num_sms;
  return per_sm < 1 ? 1 : (per_sm > kDecodeMaxSplits ? kDecodeMaxSplits : per_sm);
}
inline DecodeAttentionPlan plan_decode_attention(int num_tokens, const DecodeLayers& layers, int num_sms,
                                                 int64_t max_keys) {
  const int num_kv_heads = layers.num_kv_heads;
  if (layers.whole_context && num_tokens > 0 && num_tokens * num_kv_heads <= num_sms &&
      max_keys <= kDecodeWholeContextKeys) {
    return {1, false, true};
  }
  if (layers.all_heads && num_tokens > 0 && num_kv_heads <= kDecodeAllHeadsMaxKvHeads &&
      num_tokens * num_kv_heads > num_sms &&
      static_cast<int64_t>(num_tokens) * max_keys >= static_cast<int64_t>(num_sms) * kDecodeAllHeadsMinKeysPerSm) {
    return {decode_attention_all_heads_splits(num_tokens, num_sms), true};
  }
  return {decode_attention_num_splits(num_tokens, num_kv_heads, num_sms, max_keys), false};
}

// Whether a layer of this shape runs a plan's all-heads kernel (tensor cores, head_dim 64 or 128, every KV head's
// 16-key tile in one block's shared memory); layers that do not take the per-KV-head kernel on the same plan.
bool decode_attention_all_heads_supports(int head_dim, int num_kv_heads);
// Whether a layer can take the whole-context kernel (DecodeLayers::whole_context): the per-KV-head tensor-core
// kernel (head_dim 64 or 128, values as wide as keys) bringing its keys in pages, from cache blocks of a multiple
// of kDecodePageKeys tokens.
bool decode_attention_whole_context_supports(int64_t head_dim, int64_t value_dim, int64_t block_size);

// Head sizes and GQA group sizes (query heads per KV head) this kernel is built for.
bool decode_attention_supports(int head_dim, int group_size);

// Throws std::invalid_argument on shapes it does not support.
void launch_decode_attention(const DecodeAttentionParams& params, cudaStream_t stream);

// The per-share kernels: tensor cores for head_dim 64 and 128 with groups up to 16 (decode_attention_mma_kernel.cuh),
// per KV head or for all of them; CUDA cores for every other head size and group (decode_attention_kernel.cuh), with
// MaxDim the instantiated capacity (16, 32, 64, 128, 256, 512) that holds the head.
template <int HeadDim>
void launch_decode_attention_mma(const DecodeAttentionParams& params, cudaStream_t stream);
template <int HeadDim>
void launch_decode_attention_all_heads(const DecodeAttentionParams& params, cudaStream_t stream);
template <int MaxDim>
void launch_decode_attention_chunks(const DecodeAttentionParams& params, cudaStream_t stream);

}  // namespace tern::kernels
