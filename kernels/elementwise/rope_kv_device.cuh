#pragma once
// Device helpers of the kernels that rotate keys and write them to the paged KV cache (rope_kv.cu, and the batch-1
// GEMV that does both in its epilogue).
#include "elementwise/rope_kv.h"

namespace tern::kernels {

// -1 for a token another context-parallel rank caches.
__device__ __forceinline__ int64_t slot_of(const KvSlots& s, int token) {
  int position = s.positions[token];
  if (s.shard_size > 1) {
    if (position % s.shard_size != s.shard_rank) return -1;
    position /= s.shard_size;
  }
  const int block = s.block_tables[s.block_table_offsets[s.token_seq[token]] + position / s.block_size];
  return static_cast<int64_t>(block) * s.block_size + position % s.block_size;
}

// Element `index` of a slot's keys (or values) in the cache: bf16, or the e4m3 code of value / scale (a correctly
// rounded division whatever the build's math flags, so that the codes are the CPU backend's).
__device__ __forceinline__ void write_kv(const KvWriteParams& p, bool is_key, int64_t index, float value) {
  if (p.key_codes) {
    (is_key ? p.key_codes : p.value_codes)[index] =
        __nv_fp8_e4m3(__fdiv_rn(value, is_key ? p.key_scale : p.value_scale));
  } else {
    (is_key ? p.key_cache : p.value_cache)[index] = __float2bfloat16(value);
  }
}

// (cos, sin) of rotary frequency i at a position (sin negated for the inverse rotation), times the attention scaling. The angle is a float32 product, as
// transformers computes it.
__device__ __forceinline__ float2 rotary_angle(float position, const RopeSpec& rope, int i) {
  float sin_v, cos_v;
  sincosf(position * rope.inv_freq[i], &sin_v, &cos_v);
  if (rope.inverse) sin_v = -sin_v;
  return make_float2(cos_v * rope.attention_scaling, sin_v * rope.attention_scaling);
}

}  // namespace tern::kernels
