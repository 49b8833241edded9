#pragma once
// Paged attention of DeepSeek's Multi-head Latent Attention in its absorbed form: every query head attends over one
// shared KV "head" per token, the cached key (kv_lora_rank latent dims followed by the rotary key), and the value is
// the key's first value_dim dims (the latent), so the cache holds keys only and each key tile is read once for all
// the query heads of a block (FlashMLA's idea). Query rows are (token, head) pairs, 64 to a block, on bf16 tensor
// cores (mma.sync m16n8k16, float32 softmax and accumulators); key and value dims are any multiple of 8 up to
// kMlaMaxKeyDim (the real model's 512 + 64).
//
// One launch serves a step of the shared attention plan (cuda_step.h): prefill tiles of kPrefillTileRows new tokens
// of a sequence, causal over cached context, whose (token, head) rows are cut into blocks of 64; and split-KV items
// (token, share of its keys) for decode tokens, one block per item and 64 heads, merged by merge_shares. Grid
// sizes depend on the plan's counts only, so a recorded CUDA graph replays at every length its plan serves.
#include <cuda_runtime.h>

#include "attention/decode_attention.h"
#include "attention/paged_kv.h"
#include "attention/prefill_attention.h"

namespace tern::kernels {

constexpr int kMlaMaxKeyDim = 576;
// A block holds a whole SM (its shared memory), where the split-KV plan (decode_attention_num_splits) assumes
// kDecodeBlocksPerSm blocks per KV head: planning MLA layers as this many KV heads gives one wave of blocks per 64
// query heads.
constexpr int kMlaDecodeSplitHeads = kDecodeBlocksPerSm;

struct MlaAttentionParams {
  const __nv_bfloat16* query = nullptr;  // [num_tokens, num_heads, key_dim]
  __nv_bfloat16* out = nullptr;          // [num_tokens, num_heads, value_dim]
  // keys: [num_slots, key_dim] (one KV head), or an FP8 cache's key_codes and key_scale; values are the keys'
  // first value_dim dims, `values` and `value_codes` are unused.
  PagedKv kv;
  AttentionBatch batch;
  int num_heads = 0;
  int key_dim = 0;
  int value_dim = 0;
  float scale = 1.0f;

  // Prefill tiles, as in PrefillAttentionParams.
  const int32_t* tile_seq = nullptr;  // [num_tiles]
  const int32_t* tile_row = nullptr;  // [num_tiles]: first new-token row of the tile within its sequence
  int num_tiles = 0;

  // Decode items, as in DecodeAttentionParams.
  const int32_t* item_token = nullptr;  // [num_items]
  const int32_t* item_chunk = nullptr;  // [num_items]
  int num_items = 0;
  int num_splits = 1;
  const int32_t* tokens = nullptr;            // [num_decode_tokens]
  const int32_t* token_item_begin = nullptr;  // [num_decode_tokens + 1]
  int num_decode_tokens = 0;
  float* partial_out = nullptr;  // workspace [num_items, num_heads, value_dim]
  float* partial_lse = nullptr;  // workspace [num_items, num_heads], log2 domain
  // Decode context parallelism: float32 output and log-sum-exp of the decode items in place of `out`
  // (MergeSharesParams).
  float* out_f32 = nullptr;
  float* out_lse = nullptr;
};

// Key and value dims this kernel is built for: multiples of 8, value_dim <= key_dim <= kMlaMaxKeyDim.
bool mla_attention_supports(int key_dim, int value_dim);

// Throws std::invalid_argument on shapes it does not support.
void launch_mla_attention(const MlaAttentionParams& params, cudaStream_t stream);

// The tile kernels for value dims up to MaxValueDim (128, 512, 576): each warp keeps the accumulators of half of
// the value dims, so the bound sizes its registers. Split: decode items (partial results) or prefill tiles.
template <int MaxValueDim>
void launch_mla_attention_tiles(const MlaAttentionParams& params, bool split, cudaStream_t stream);

}  // namespace tern::kernels
