#pragma once
// DeepSeek-V4's compressed attention path over the paged cache (layout in src/backend/compressed_kv.h): the
// compressors that pool windows of tokens into compressed entries and attention over a sliding window of keys plus
// compressed entries (the Lightning Indexer's top-k choice of entries is in v4/indexer_topk.h). Layer state rows are
// float32; keys bf16.
// Every grid is sized by the step's tokens (never by context length), so recorded CUDA graphs replay at any length.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "v4/v4_math.h"

namespace tern::kernels {

// Where each new token of the step lives: its position and its sequence's block table.
struct V4Tokens {
  const int32_t* positions = nullptr;            // [num_tokens]
  const int32_t* token_seq = nullptr;            // [num_tokens]
  const int32_t* block_tables = nullptr;         // all sequences' tables back to back
  const int32_t* block_table_offsets = nullptr;  // [num_seqs], of the layer's KV cache group
  int block_size = 0;
  int num_tokens = 0;
};

struct CompressKvParams {
  const __nv_bfloat16* kv = nullptr;             // [num_tokens, width]
  const __nv_bfloat16* gate = nullptr;           // [num_tokens, width]
  const __nv_bfloat16* position_bias = nullptr;  // [compress_rate, width]
  const __nv_bfloat16* norm_weight = nullptr;    // [entry_dim]
  float norm_eps = 1e-6f;
  v4::RotarySpec rope;  // rotates each entry at its window's first position
  float* states = nullptr;  // [num_slots, state_dim]
  int state_dim = 0;
  int state_offset = 0;  // this compressor's region: [kv (width) | gate (width) | entry (entry_dim)]
  int compress_rate = 0;
  int entry_dim = 0;
  bool overlapping = false;  // width = 2 * entry_dim (CSA) instead of entry_dim (HCA)
  V4Tokens tokens;
};

// Writes every token's kv and biased gate into its state row, then the entry of each window a token closes.
void launch_compress_kv(const CompressKvParams& params, cudaStream_t stream);

struct CompressedAttentionParams {
  const __nv_bfloat16* query = nullptr;  // [num_tokens, num_heads, head_dim]
  const __nv_bfloat16* keys = nullptr;   // [num_slots, head_dim]: K = V
  // An FP8 cache (--kv-cache-dtype fp8_e4m3) instead: e4m3 codes of key / key_scale; `keys` is null.
  const __nv_fp8_e4m3* key_codes = nullptr;
  float key_scale = 1.0f;
  const float* states = nullptr;         // [num_slots, state_dim]; null without compressed entries
  int state_dim = 0;
  int entry_offset = 0;
  int compress_rate = 0;  // 0: sliding window only
  int sliding_window = 0;  // 0: every earlier token
  const float* sinks = nullptr;       // [num_heads] or null
  const int32_t* selected = nullptr;  // [num_tokens, top_k] or null: every closed window
  int top_k = 0;
  int num_heads = 0;
  int head_dim = 0;
  float scale = 1.0f;
  __nv_bfloat16* out = nullptr;  // [num_tokens, num_heads, head_dim]
  // Workspace where compressed_attention_splits(num_tokens) > 1: each split's results, merged afterwards.
  float* partial_out = nullptr;  // [num_tokens, splits, num_heads, head_dim]
  float* partial_lse = nullptr;  // [num_tokens, splits, num_heads]
  V4Tokens tokens;
};

constexpr int kMaxCompressedHeadDim = 512;

// Blocks that share a token's candidates, from the step's token count alone (so that recorded graphs replay).
int compressed_attention_splits(int num_tokens);

// On tensor cores, 64 heads of a token to a block (v4/compressed_attention.cu); head_dim a multiple of 8.
void launch_compressed_attention(const CompressedAttentionParams& params, cudaStream_t stream);

}  // namespace tern::kernels
