#pragma once
// The paged KV cache and per-step batch layout as the attention kernels see them: raw device pointers only.
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <cstdint>

namespace tern::kernels {

struct PagedKv {
  const __nv_bfloat16* keys = nullptr;    // [num_slots, num_kv_heads, head_dim]
  const __nv_bfloat16* values = nullptr;  // [num_slots, num_kv_heads, head_dim]
  // An FP8 cache (--kv-cache-dtype fp8_e4m3) instead, same shapes: e4m3 codes of key / key_scale and
  // value / value_scale; keys and values are null. The prefill and split-KV kernels convert them as they read.
  const __nv_fp8_e4m3* key_codes = nullptr;
  const __nv_fp8_e4m3* value_codes = nullptr;
  float key_scale = 1.0f;
  float value_scale = 1.0f;
  int block_size = 0;
  int64_t num_slots = 0;  // rows of keys and values (blocks x block_size), for the decode kernel's tensor maps
  const int32_t* block_tables = nullptr;         // all sequences' block tables back to back
  const int32_t* block_table_offsets = nullptr;  // [num_seqs]: where each sequence's table starts

  __host__ __device__ bool fp8() const { return key_codes != nullptr; }

  // Row of `kv_head` for the token at `position` of sequence `seq`, in elements of head_dim.
  __device__ __forceinline__ int64_t row(int seq, int position, int num_kv_heads, int kv_head) const {
    const int block = block_tables[block_table_offsets[seq] + position / block_size];
    const int64_t slot = static_cast<int64_t>(block) * block_size + position % block_size;
    return slot * num_kv_heads + kv_head;
  }
};

// What every attention kernel needs about the batch: tokens of sequences back to back.
struct AttentionBatch {
  const int32_t* cu_seqlens = nullptr;         // [num_seqs + 1]: first token row of each sequence
  const int32_t* num_cached_tokens = nullptr;  // [num_seqs]: context before this step's tokens
  const int32_t* token_seq = nullptr;          // [num_tokens]: sequence of each token
  const int32_t* positions = nullptr;          // [num_tokens]
};

struct AttentionShape {
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  float scale = 1.0f;
  int sliding_window = 0;        // 0: full attention
  const float* sinks = nullptr;  // [num_heads] or null
};

}  // namespace tern::kernels
