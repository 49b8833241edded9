#include <stdexcept>
#include <string>

#include "common/dependent_launch.cuh"
#include "common/device_math.cuh"
#include "elementwise/rope_kv_device.cuh"
#include "elementwise/rope_kv.h"

namespace tern::kernels {

namespace {

constexpr int kThreads = 256;
constexpr int kMaxRotaryPairs = 256;  // rotary dims up to 512

// Each token's cos and sin per rotary pair, computed once per block into shared memory and shared by all of its
// heads (sincosf is the slow part of a decode step's rotation).
__device__ void load_angles(float2* angles, float position, const RopeSpec& rope) {
  for (int i = threadIdx.x; i < rope.rotary_dim / 2; i += blockDim.x) angles[i] = rotary_angle(position, rope, i);
  __syncthreads();
}

// The rotary pair of dim d (counted from rope.first_dim, d < rotary_dim): its partner dim (counted the same way),
// its frequency index, and whether d is the pair's first element (which gets x cos - partner sin; the second gets
// x cos + partner sin).
struct RotaryPair {
  int partner;
  int frequency;
  bool first;
};
__device__ __forceinline__ RotaryPair rotary_pair(int d, const RopeSpec& rope) {
  if (rope.interleaved) return {d ^ 1, d / 2, (d & 1) == 0};
  const int half = rope.rotary_dim / 2;
  return d < half ? RotaryPair{d + half, d, true} : RotaryPair{d - half, d - half, false};
}

// Element d of a rotated head, read from the input head (never in place): bf16 in memory, or float32 in shared
// memory.
template <typename Element>
__device__ __forceinline__ float rotated(const Element* head, int d, const float2* angles, const RopeSpec& rope) {
  const float x = to_float(head[d]);
  if (d < rope.first_dim || d >= rope.first_dim + rope.rotary_dim) return x;
  const RotaryPair pair = rotary_pair(d - rope.first_dim, rope);
  const float2 a = angles[pair.frequency];
  const float partner = to_float(head[rope.first_dim + pair.partner]);
  return pair.first ? x * a.x - partner * a.y : x * a.x + partner * a.y;
}

// Threads walk the (head, rotary pair) grid so that each pair is read and written once; dst may be x (in place).
// Dims outside the rotary ones are copied where dst is not x.
__device__ void rope_heads(const __nv_bfloat16* x, __nv_bfloat16* dst, int num_heads, int head_dim,
                           const float2* angles, const RopeSpec& rope) {
  const int half = rope.rotary_dim / 2;
  for (int i = threadIdx.x; i < num_heads * half; i += blockDim.x) {
    const int64_t offset = (i / half) * head_dim + rope.first_dim;
    const int d = rope.interleaved ? 2 * (i % half) : i % half;  // the pair's first dim
    const RotaryPair pair = rotary_pair(d, rope);
    const float lo = __bfloat162float(x[offset + d]);
    const float hi = __bfloat162float(x[offset + pair.partner]);
    const float2 a = angles[pair.frequency];
    dst[offset + d] = __float2bfloat16(lo * a.x - hi * a.y);
    dst[offset + pair.partner] = __float2bfloat16(hi * a.x + lo * a.y);
  }
  if (dst == x) return;
  const int passed = head_dim - rope.rotary_dim;
  for (int i = threadIdx.x; i < num_heads * passed; i += blockDim.x) {
    const int d = i % passed;
    const int64_t element = (i / passed) * head_dim + (d < rope.first_dim ? d : d + rope.rotary_dim);
    dst[element] = x[element];
  }
}

// One block per token.
__global__ void __launch_bounds__(kThreads) rope_kernel(__nv_bfloat16* x, int num_heads, int head_dim, RopeSpec rope,
                                                        const int32_t* positions) {
  __shared__ float2 angles[kMaxRotaryPairs];
  const int token = blockIdx.x;
  load_angles(angles, static_cast<float>(positions[token]), rope);  // step metadata: before the wait
  wait_for_prior_grids();
  allow_dependent_grids();
  __nv_bfloat16* heads = x + static_cast<int64_t>(token) * num_heads * head_dim;
  rope_heads(heads, heads, num_heads, head_dim, angles, rope);
}

// A token's values into its cache slot, by the block's threads.
__device__ void write_values(const KvWriteParams& p, int token, int64_t slot) {
  const int value_row = p.num_kv_heads * p.value_dim;
  const __nv_bfloat16* value = p.value + token * p.value_stride;
  if (p.value_codes) {
    for (int i = threadIdx.x; i < value_row; i += blockDim.x) {
      write_kv(p, false, slot * value_row + i, __bfloat162float(value[i]));
    }
    return;
  }
  __nv_bfloat16* value_dst = p.value_cache + slot * value_row;
  if (value_row % 8 == 0 && p.value_stride % 8 == 0 && reinterpret_cast<uintptr_t>(p.value) % 16 == 0) {
    const uint4* src = reinterpret_cast<const uint4*>(value);
    uint4* dst = reinterpret_cast<uint4*>(value_dst);
    for (int i = threadIdx.x; i < value_row / 8; i += blockDim.x) dst[i] = src[i];
  } else {
    for (int i = threadIdx.x; i < value_row; i += blockDim.x) value_dst[i] = value[i];
  }
}

// One block per token.
template <bool Rotate>
__global__ void __launch_bounds__(kThreads)
    kv_write_kernel(const __nv_bfloat16* query, int64_t query_stride, __nv_bfloat16* query_out, int num_heads,
                    KvWriteParams p, RopeSpec rope) {
  __shared__ float2 angles[kMaxRotaryPairs];
  const int token = blockIdx.x;
  const int64_t slot = slot_of(p.slots, token);  // step metadata: read before the wait
  if (Rotate) load_angles(angles, static_cast<float>(p.slots.positions[token]), rope);
  wait_for_prior_grids();
  allow_dependent_grids();
  if (Rotate) {
    rope_heads(query + token * query_stride, query_out + static_cast<int64_t>(token) * num_heads * p.key_dim,
               num_heads, p.key_dim, angles, rope);
  }
  if (slot < 0) return;
  const int key_row = p.num_kv_heads * p.key_dim;
  const __nv_bfloat16* key = p.key + token * p.key_stride;
  for (int i = threadIdx.x; i < key_row; i += blockDim.x) {
    // Rounded to bf16 as a bf16 cache holds it, then to its code in an FP8 one.
    const __nv_bfloat16 k =
        Rotate ? __float2bfloat16(rotated(key + (i / p.key_dim) * p.key_dim, i % p.key_dim, angles, rope)) : key[i];
    write_kv(p, true, slot * key_row + i, __bfloat162float(k));
  }
  write_values(p, token, slot);
}

// The fused op for rotate-half pairs when every piece is whole 16-byte vectors (rotary_dim % 16 == 0, head dims
// % 8 == 0): a thread
// takes 8 rotary pairs at once (the vector at d and its partner at d + rotary_dim / 2), so a decode token's
// heads are one or two rounds of independent loads instead of a chain of dependent scalar ones.
__global__ void __launch_bounds__(kThreads)
    rope_kv_vec_kernel(const __nv_bfloat16* query, int64_t query_stride, __nv_bfloat16* query_out, int num_heads,
                       KvWriteParams p, RopeSpec rope) {
  __shared__ float2 angles[kMaxRotaryPairs];
  const int token = blockIdx.x;
  const int64_t slot = slot_of(p.slots, token);  // step metadata: read before the wait
  load_angles(angles, static_cast<float>(p.slots.positions[token]), rope);
  wait_for_prior_grids();
  allow_dependent_grids();
  const int half = rope.rotary_dim / 2;
  const int pair_vectors = half / 8;                           // per head
  const int pass_vectors = (p.key_dim - rope.rotary_dim) / 8;  // unrotated dims of a key head
  // Unrotated query dims are copied where query_out is not query; in place they stay where they are.
  const int query_pass_vectors = query_out == query ? 0 : pass_vectors;
  const int query_units = num_heads * (pair_vectors + query_pass_vectors);
  const int key_units = slot < 0 ? 0 : p.num_kv_heads * (pair_vectors + pass_vectors);
  const int value_units = slot < 0 ? 0 : p.num_kv_heads * p.value_dim / 8;
  const __nv_bfloat16* q = query + token * query_stride;
  __nv_bfloat16* q_dst = query_out + static_cast<int64_t>(token) * num_heads * p.key_dim;
  const __nv_bfloat16* key = p.key + token * p.key_stride;
  __nv_bfloat16* key_dst = p.key_cache + slot * p.num_kv_heads * p.key_dim;
  for (int u = threadIdx.x; u < query_units + key_units + value_units; u += blockDim.x) {
    if (u >= query_units + key_units) {
      const int v = u - query_units - key_units;
      reinterpret_cast<uint4*>(p.value_cache + slot * p.num_kv_heads * p.value_dim)[v] =
          reinterpret_cast<const uint4*>(p.value + token * p.value_stride)[v];
      continue;
    }
    const bool is_query = u < query_units;
    const int unit = is_query ? u : u - query_units;
    const int per_head = pair_vectors + (is_query ? query_pass_vectors : pass_vectors);
    const int head = unit / per_head;
    const int j = unit % per_head;
    const __nv_bfloat16* src = (is_query ? q : key) + head * p.key_dim;
    __nv_bfloat16* dst = (is_query ? q_dst : key_dst) + head * p.key_dim;
    if (j >= pair_vectors) {  // an unrotated vector
      const int d = rope.rotary_dim + 8 * (j - pair_vectors);
      *reinterpret_cast<uint4*>(dst + d) = *reinterpret_cast<const uint4*>(src + d);
      continue;
    }
    float lo[8], hi[8], out_lo[8], out_hi[8];
    load_f32x8(src + 8 * j, lo);
    load_f32x8(src + half + 8 * j, hi);
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const float2 a = angles[8 * j + e];
      out_lo[e] = lo[e] * a.x - hi[e] * a.y;
      out_hi[e] = hi[e] * a.x + lo[e] * a.y;
    }
    store_f32x8(dst + 8 * j, out_lo);
    store_f32x8(dst + half + 8 * j, out_hi);
  }
}

// rope_store_kv with Qwen3's per-head RMSNorm of q and k ahead of the rotation: each head normalized over its dims
// (one weight for every query head, another for every key head) and rounded to bf16 as the separate rms_norm
// stores it, then rotated and written as kv_write_kernel does. A block per (token, kHeadWarps heads), a warp per
// head: a decode token's heads run side by side (a block walking Qwen3's 36 heads 8 at a time took 7.9 us on the
// H200). The warp sums the head's squares itself, and the normalized head waits in shared memory for the
// rotation, which pairs dims that other lanes hold. The first block of a token writes its values.
constexpr int kHeadWarps = kThreads / 32;

__global__ void __launch_bounds__(kThreads)
    head_norm_rope_kv_kernel(const __nv_bfloat16* query, int64_t query_stride, __nv_bfloat16* query_out,
                             int num_heads, KvWriteParams p, RopeSpec rope, HeadNorms norms) {
  __shared__ float2 angles[kMaxRotaryPairs];
  __shared__ float normalized[kHeadWarps][kMaxNormedHeadDim];
  const int token = blockIdx.x;
  const int64_t slot = slot_of(p.slots, token);  // step metadata: read before the wait
  load_angles(angles, static_cast<float>(p.slots.positions[token]), rope);
  wait_for_prior_grids();
  allow_dependent_grids();
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int key_heads = slot < 0 ? 0 : p.num_kv_heads;
  float* head = normalized[warp];
  const int h = blockIdx.y * kHeadWarps + warp;
  if (h < num_heads + key_heads) {
    const bool is_query = h < num_heads;
    const int key_head = h - num_heads;
    const __nv_bfloat16* src = is_query ? query + token * query_stride + h * p.key_dim
                                        : p.key + token * p.key_stride + key_head * p.key_dim;
    const __nv_bfloat16* weight = is_query ? norms.query : norms.key;
    float sum_sq = 0.0f;
    for (int d = lane; d < p.key_dim; d += 32) {
      const float x = __bfloat162float(src[d]);
      head[d] = x;
      sum_sq += x * x;
    }
    const float scale = rsqrtf(warp_sum(sum_sq) / p.key_dim + norms.eps);
    for (int d = lane; d < p.key_dim; d += 32) {
      head[d] = __bfloat162float(__float2bfloat16(head[d] * scale * __bfloat162float(weight[d])));
    }
    __syncwarp();
    for (int d = lane; d < p.key_dim; d += 32) {
      const __nv_bfloat16 out = __float2bfloat16(rotated(head, d, angles, rope));
      if (is_query) {
        query_out[(static_cast<int64_t>(token) * num_heads + h) * p.key_dim + d] = out;
      } else {
        write_kv(p, true, (slot * p.num_kv_heads + key_head) * p.key_dim + d, __bfloat162float(out));
      }
    }
  }
  if (slot >= 0 && blockIdx.y == 0) write_values(p, token, slot);
}

bool vectorizable(const KvWriteParams& p, const RopeSpec& rope, const __nv_bfloat16* query, int64_t query_stride,
                  const __nv_bfloat16* query_out) {
  const auto aligned = [](const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; };
  return !p.key_codes && !rope.interleaved && rope.first_dim == 0 && !rope.inverse && rope.rotary_dim > 0 &&
         rope.rotary_dim % 16 == 0 && p.key_dim % 8 == 0 && p.value_dim % 8 == 0 && query_stride % 8 == 0 &&
         p.key_stride % 8 == 0 && aligned(query) && aligned(query_out) && aligned(p.key) && aligned(p.key_cache) &&
         (p.value_dim == 0 || (p.value_stride % 8 == 0 && aligned(p.value) && aligned(p.value_cache)));
}

void check_rope(const RopeSpec& rope, int head_dim) {
  if (rope.rotary_dim < 0 || rope.rotary_dim % 2 != 0 || rope.first_dim < 0 ||
      rope.first_dim + rope.rotary_dim > head_dim ||
      rope.rotary_dim / 2 > kMaxRotaryPairs) {
    throw std::invalid_argument("rope: rotary_dim must be even, its dims within the head and at most " +
                                std::to_string(2 * kMaxRotaryPairs));
  }
}

void check_kv(const KvWriteParams& p) {
  if (p.slots.block_size <= 0) throw std::invalid_argument("store_kv: block size must be positive");
  if (p.slots.shard_size < 1 || p.slots.shard_rank < 0 || p.slots.shard_rank >= p.slots.shard_size) {
    throw std::invalid_argument("store_kv: context shard rank " + std::to_string(p.slots.shard_rank) + " of " +
                                std::to_string(p.slots.shard_size));
  }
  if (!p.key_cache == !p.key_codes || (p.value_dim > 0 && (!p.value || !p.value_cache == !p.value_codes))) {
    throw std::invalid_argument("store_kv: keys or values missing, or both bf16 and FP8 destinations given");
  }
  if (p.key_stride < int64_t{p.num_kv_heads} * p.key_dim ||
      (p.value_dim > 0 && p.value_stride < int64_t{p.num_kv_heads} * p.value_dim)) {
    throw std::invalid_argument("store_kv: token strides shorter than a token's keys or values");
  }
}

}  // namespace

void launch_rope(__nv_bfloat16* x, int num_tokens, int num_heads, int head_dim, const RopeSpec& rope,
                 const int32_t* positions, cudaStream_t stream) {
  check_rope(rope, head_dim);
  if (num_tokens == 0 || rope.rotary_dim == 0) return;
  launch_dependent("rope", rope_kernel, num_tokens, kThreads, 0, stream, x, num_heads, head_dim, rope, positions);
}

void launch_store_kv(const KvWriteParams& p, cudaStream_t stream) {
  check_kv(p);
  if (p.num_tokens == 0) return;
  launch_dependent("store_kv", kv_write_kernel<false>, p.num_tokens, kThreads, 0, stream, nullptr, int64_t{0}, nullptr,
                   0, p, RopeSpec{});
}

void launch_rope_store_kv(const __nv_bfloat16* query, int64_t query_stride, __nv_bfloat16* query_out, int num_heads,
                          const KvWriteParams& p, const RopeSpec& rope, cudaStream_t stream, const HeadNorms& norms) {
  check_kv(p);
  check_rope(rope, p.key_dim);
  if (query_stride < int64_t{num_heads} * p.key_dim) {
    throw std::invalid_argument("rope_store_kv: query stride shorter than a token's query heads");
  }
  const bool head_norms = norms.query || norms.key;
  if (head_norms && (!norms.query || !norms.key || p.key_dim > kMaxNormedHeadDim)) {
    throw std::invalid_argument("rope_store_kv: head norms need both weights and heads of at most " +
                                std::to_string(kMaxNormedHeadDim) + " dims");
  }
  if (p.num_tokens == 0) return;
  if (head_norms) {
    const dim3 grid(p.num_tokens, (num_heads + p.num_kv_heads + kHeadWarps - 1) / kHeadWarps);
    launch_dependent("rope_store_kv (head norms)", head_norm_rope_kv_kernel, grid, kThreads, 0, stream, query,
                     query_stride, query_out, num_heads, p, rope, norms);
  } else if (vectorizable(p, rope, query, query_stride, query_out)) {
    launch_dependent("rope_store_kv", rope_kv_vec_kernel, p.num_tokens, kThreads, 0, stream, query, query_stride,
                     query_out, num_heads, p, rope);
  } else {
    launch_dependent("rope_store_kv", kv_write_kernel<true>, p.num_tokens, kThreads, 0, stream, query, query_stride,
                     query_out, num_heads, p, rope);
  }
}

}  // namespace tern::kernels
