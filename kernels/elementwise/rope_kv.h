#pragma once
// Rotary position embedding (rotate-half or interleaved pairs, partial rotary) and the paged KV-cache write,
// separately or fused: the fused form rotates the queries in place and writes rotated keys and plain values to their
// cache slots in one launch, so rotated keys never make a round trip through device memory.
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace tern::kernels {

struct RopeSpec {
  const float* inv_freq = nullptr;  // [rotary_dim / 2]
  int rotary_dim = 0;
  float attention_scaling = 1.0f;
  // Pairs rotated together: (i, i + rotary_dim / 2) (rotate-half, Llama) or (2i, 2i + 1) (interleaved, DeepSeek).
  bool interleaved = false;
  // The first rotated dim of a head: 0 (most models) or head_dim - rotary_dim (DeepSeek-V4 rotates the last dims).
  int first_dim = 0;
  bool inverse = false;  // rotate by the negative angle (DeepSeek-V4 rotates its attention output back)
};

// Where each token's KV goes: slot = block_tables[offsets[seq] + position / block_size] * block_size + offset.
// Under decode context parallelism (shard_size > 1, src/backend/kv_context_shard.h) this rank caches only the
// positions p with p % shard_size == shard_rank, each as its rank-local token p / shard_size in place of the
// position; the others' keys and values are not written (their queries are still rotated).
struct KvSlots {
  const int32_t* positions = nullptr;            // [num_tokens]
  const int32_t* token_seq = nullptr;            // [num_tokens]
  const int32_t* block_tables = nullptr;         // all sequences' tables back to back
  const int32_t* block_table_offsets = nullptr;  // [num_seqs]
  int block_size = 0;
  int shard_rank = 0;
  int shard_size = 1;
};

// x [num_tokens, num_heads, head_dim], rotated in place at positions [num_tokens] (device memory).
void launch_rope(__nv_bfloat16* x, int num_tokens, int num_heads, int head_dim, const RopeSpec& rope,
                 const int32_t* positions, cudaStream_t stream);

struct KvWriteParams {
  // Token t's keys [num_kv_heads, key_dim] at key + t * key_stride, its values [num_kv_heads, value_dim] at
  // value + t * value_stride (null when value_dim is 0): packed tensors, or the columns of a q/k/v projection's rows.
  const __nv_bfloat16* key = nullptr;
  const __nv_bfloat16* value = nullptr;
  int64_t key_stride = 0;    // at least num_kv_heads * key_dim
  int64_t value_stride = 0;  // at least num_kv_heads * value_dim
  __nv_bfloat16* key_cache = nullptr;    // [num_slots, num_kv_heads, key_dim]
  __nv_bfloat16* value_cache = nullptr;  // [num_slots, num_kv_heads, value_dim]
  // An FP8 cache (--kv-cache-dtype fp8_e4m3) instead: e4m3 codes of key / key_scale and value / value_scale, the
  // nearest code, saturating at +-448 (as the CPU backend stores them); key_cache and value_cache are null.
  __nv_fp8_e4m3* key_codes = nullptr;
  __nv_fp8_e4m3* value_codes = nullptr;
  float key_scale = 1.0f;
  float value_scale = 1.0f;
  int num_tokens = 0;
  int num_kv_heads = 0;
  int key_dim = 0;
  int value_dim = 0;
  KvSlots slots;
};

void launch_store_kv(const KvWriteParams& params, cudaStream_t stream);

// Per-head RMSNorm of queries and keys before the rotation (Qwen3's q_norm and k_norm, DeepSeek-V4's query and kv
// norms): weights [key_dim], both or neither, for heads of at most kMaxNormedHeadDim dims.
struct HeadNorms {
  const __nv_bfloat16* query = nullptr;
  const __nv_bfloat16* key = nullptr;
  float eps = 1e-6f;
};
constexpr int kMaxNormedHeadDim = 512;

// Writes rope(query) to query_out [num_tokens, num_heads, key_dim], and rope(key) and value to the cache; with
// norms, rope(rms_norm(query)) and rope(rms_norm(key)). Token t's query heads are read at query + t * query_stride;
// query_out may be query itself (packed, rotated in place).
void launch_rope_store_kv(const __nv_bfloat16* query, int64_t query_stride, __nv_bfloat16* query_out, int num_heads,
                          const KvWriteParams& params, const RopeSpec& rope, cudaStream_t stream,
                          const HeadNorms& norms = {});

}  // namespace tern::kernels
