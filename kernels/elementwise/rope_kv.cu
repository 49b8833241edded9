#include <stdexcept>

#include "elementwise/rope_kv.h"

namespace tern::kernels {

namespace {

__device__ __forceinline__ int64_t slot_of(const KvSlots& s, int token) {
  const int position = s.positions[token];
  const int block = s.block_tables[s.block_table_offsets[s.token_seq[token]] + position / s.block_size];
  return static_cast<int64_t>(block) * s.block_size + position % s.block_size;
}

// Element d of a rotated head, computed from the input head (never in place); the angle is a float32 product,
// as transformers computes it.
__device__ __forceinline__ float rotated(const __nv_bfloat16* head, int d, float position, const RopeSpec& rope) {
  const int half = rope.rotary_dim / 2;
  const float x = __bfloat162float(head[d]);
  if (d >= rope.rotary_dim) return x;
  const int i = d < half ? d : d - half;
  float sin_v, cos_v;
  sincosf(position * rope.inv_freq[i], &sin_v, &cos_v);
  cos_v *= rope.attention_scaling;
  sin_v *= rope.attention_scaling;
  return d < half ? x * cos_v - __bfloat162float(head[d + half]) * sin_v
                  : x * cos_v + __bfloat162float(head[d - half]) * sin_v;
}

// One block per token; threads walk the (head, rotary pair) grid so that each pair is read and written once.
__device__ void rope_heads_in_place(__nv_bfloat16* x, int num_heads, int head_dim, const RopeSpec& rope,
                                    float position) {
  const int half = rope.rotary_dim / 2;
  for (int i = threadIdx.x; i < num_heads * half; i += blockDim.x) {
    __nv_bfloat16* head = x + (i / half) * head_dim;
    const int d = i % half;
    const float lo = rotated(head, d, position, rope);
    const float hi = rotated(head, d + half, position, rope);
    head[d] = __float2bfloat16(lo);
    head[d + half] = __float2bfloat16(hi);
  }
}

__global__ void rope_kernel(__nv_bfloat16* x, int num_heads, int head_dim, RopeSpec rope, const int32_t* positions) {
  const int token = blockIdx.x;
  rope_heads_in_place(x + static_cast<int64_t>(token) * num_heads * head_dim, num_heads, head_dim, rope,
                      static_cast<float>(positions[token]));
}

template <bool Rotate>
__global__ void kv_write_kernel(__nv_bfloat16* query, int num_heads, KvWriteParams p, RopeSpec rope) {
  const int token = blockIdx.x;
  const int64_t slot = slot_of(p.slots, token);
  const float position = static_cast<float>(p.slots.positions[token]);
  if (Rotate) {
    rope_heads_in_place(query + static_cast<int64_t>(token) * num_heads * p.key_dim, num_heads, p.key_dim, rope,
                        position);
  }
  const int key_row = p.num_kv_heads * p.key_dim;
  const __nv_bfloat16* key = p.key + static_cast<int64_t>(token) * key_row;
  __nv_bfloat16* key_dst = p.key_cache + slot * key_row;
  for (int i = threadIdx.x; i < key_row; i += blockDim.x) {
    key_dst[i] = Rotate ? __float2bfloat16(rotated(key + (i / p.key_dim) * p.key_dim, i % p.key_dim, position, rope))
                        : key[i];
  }
  const int value_row = p.num_kv_heads * p.value_dim;
  const __nv_bfloat16* value = p.value + static_cast<int64_t>(token) * value_row;
  __nv_bfloat16* value_dst = p.value_cache + slot * value_row;
  for (int i = threadIdx.x; i < value_row; i += blockDim.x) value_dst[i] = value[i];
}

void check_rope(const RopeSpec& rope, int head_dim) {
  if (rope.rotary_dim < 0 || rope.rotary_dim % 2 != 0 || rope.rotary_dim > head_dim) {
    throw std::invalid_argument("rope: rotary_dim must be even and within the head dim");
  }
}

void check_kv(const KvWriteParams& p) {
  if (p.slots.block_size <= 0) throw std::invalid_argument("store_kv: block size must be positive");
  if (p.value_dim > 0 && (!p.value || !p.value_cache)) throw std::invalid_argument("store_kv: values missing");
}

}  // namespace

void launch_rope(__nv_bfloat16* x, int num_tokens, int num_heads, int head_dim, const RopeSpec& rope,
                 const int32_t* positions, cudaStream_t stream) {
  check_rope(rope, head_dim);
  if (num_tokens == 0 || rope.rotary_dim == 0) return;
  rope_kernel<<<num_tokens, 128, 0, stream>>>(x, num_heads, head_dim, rope, positions);
}

void launch_store_kv(const KvWriteParams& p, cudaStream_t stream) {
  check_kv(p);
  if (p.num_tokens == 0) return;
  kv_write_kernel<false><<<p.num_tokens, 128, 0, stream>>>(nullptr, 0, p, RopeSpec{});
}

void launch_rope_store_kv(__nv_bfloat16* query, int num_heads, const KvWriteParams& p, const RopeSpec& rope,
                          cudaStream_t stream) {
  check_kv(p);
  check_rope(rope, p.key_dim);
  if (p.num_tokens == 0) return;
  kv_write_kernel<true><<<p.num_tokens, 128, 0, stream>>>(query, num_heads, p, rope);
}

}  // namespace tern::kernels
