// DeepSeek-V4's attention over a sliding window of keys plus compressed entries on bf16 tensor cores. Every query
// head of a token attends over the same candidates (one shared K = V head), so a block takes 64 heads of one token
// as the rows of mma.m16n8k16 and reads each candidate once for all of them (FlashMLA's idea), in the tile layout
// of attention/shared_kv_tile.cuh. Window keys (bf16) come by cp.async into their tile row (an FP8 cache's codes
// through registers, as code x scale); entries (float32 state rows) come by cp.async into a staging tile and are
// rounded to bf16 into their row before the tile is used. Blocks of one token may split its candidates (decode
// steps, few tokens); their partial results are merged with the attention sinks by compressed_attention_merge_kernel.
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "attention/shared_kv_tile.cuh"
#include "common/dependent_launch.cuh"
#include "common/device_math.cuh"
#include "v4/compressed_kv.h"
#include "v4/v4_tokens.cuh"

namespace tern::kernels {

namespace {

using shared_kv::kKeys;
using shared_kv::kPStride;
using shared_kv::kRows;
using shared_kv::kThreads;
using shared_kv::padded_dim;
using shared_kv::row_stride;
constexpr int kThreadsPerKey = kThreads / kKeys;
constexpr float kLog2e = shared_kv::kLog2e;

// Splits of a token's candidates: enough blocks for the GPU at a few tokens; more would mostly add empty blocks
// at short contexts.
constexpr int kMaxSplits = 32;
constexpr int kTargetBlocks = 132;

// Q rows, two stages of candidate rows, P, and the float32 staging tile of entries.
constexpr size_t shared_bytes(int dim) {
  return static_cast<size_t>((kRows + 2 * kKeys) * row_stride(dim) + kRows * kPStride) * sizeof(__nv_bfloat16) +
         static_cast<size_t>(kKeys) * dim * sizeof(float);
}

// A token's candidates, numbered: the window's keys first, then the compressed entries (the selected ones, or
// every closed window).
struct Candidates {
  int first_window_position;
  int num_window;
  int num_closed;
  int count;

  __device__ Candidates(const CompressedAttentionParams& p, int token) {
    const int position = p.tokens.positions[token];
    first_window_position = p.sliding_window > 0 ? max(0, position - p.sliding_window + 1) : 0;
    num_window = position - first_window_position + 1;
    num_closed = p.compress_rate > 0 ? (position + 1) / p.compress_rate : 0;
    const int num_entries = p.compress_rate == 0 ? 0 : p.selected ? p.top_k : num_closed;
    count = num_window + num_entries;
  }
};

// Candidate c's vector, or null where it names none (an index of -1 or past the closed windows: the indexer found
// fewer); `entry` tells a float32 entry from a key (bf16, or e4m3 codes in an FP8 cache).
__device__ __forceinline__ const void* candidate_source(const CompressedAttentionParams& p, const Candidates& cands,
                                                       int token, int c, bool& entry) {
  entry = false;
  if (c >= cands.count) return nullptr;
  if (c < cands.num_window) {
    const int64_t key = v4::token_slot(p.tokens, token, cands.first_window_position + c) * p.head_dim;
    return p.key_codes ? static_cast<const void*>(p.key_codes + key) : static_cast<const void*>(p.keys + key);
  }
  const int k = c - cands.num_window;
  const int e = p.selected ? p.selected[static_cast<int64_t>(token) * p.top_k + k] : k;
  if (e < 0 || e >= cands.num_closed) return nullptr;
  entry = true;
  return p.states + v4::token_slot(p.tokens, token, (e + 1) * p.compress_rate - 1) * p.state_dim + p.entry_offset;
}

template <int MaxDim, bool Split, bool Fp8>
__global__ void __launch_bounds__(kThreads, 1) compressed_attention_kernel(const CompressedAttentionParams p) {
  constexpr int kChunksPerWarp = (MaxDim / 16 + 1) / 2;  // 16-column chunks of a warp's half of the dims
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __shared__ float half_max[2][kRows];
  __shared__ float half_sum[2][kRows];
  __shared__ bool key_valid[2][kKeys];
  wait_for_prior_grids();
  allow_dependent_grids();
  __shared__ bool key_is_entry[kKeys];  // of the tile in the staging buffer

  const int dim = p.head_dim;
  const int stride = row_stride(dim);
  const int dim16 = padded_dim(dim);
  __nv_bfloat16* q_smem = reinterpret_cast<__nv_bfloat16*>(smem_raw);  // [kRows][stride]
  __nv_bfloat16* k_smem = q_smem + kRows * stride;                      // [2 stages][kKeys][stride]
  __nv_bfloat16* p_smem = k_smem + 2 * kKeys * stride;                  // [kRows][kPStride]
  float* staging = reinterpret_cast<float*>(p_smem + kRows * kPStride);  // [kKeys][dim]

  const shared_kv::Place place;
  const int token = blockIdx.x;
  const int head0 = blockIdx.y * kRows;
  // Rows past the heads repeat the last head, so that their softmax stays finite, and are never written.
  const int num_rows = min(kRows, p.num_heads - head0);
  const Candidates cands(p, token);
  int begin = 0, end = cands.count;
  if (Split) {
    const int per_split = ((cands.count + gridDim.z - 1) / gridDim.z + kKeys - 1) / kKeys * kKeys;
    begin = min(cands.count, static_cast<int>(blockIdx.z) * per_split);
    end = min(cands.count, begin + per_split);
  }

  const int chunks_per_row = dim16 / 8;
  for (int i = threadIdx.x; i < kRows * chunks_per_row; i += blockDim.x) {
    const int r = i / chunks_per_row;
    const int c = i % chunks_per_row;
    const bool in_row = c * 8 < dim;
    const int head = head0 + min(r, num_rows - 1);
    const __nv_bfloat16* src =
        p.query + (static_cast<int64_t>(token) * p.num_heads + head) * dim + (in_row ? c * 8 : 0);
    cp_async_16(q_smem + r * stride + c * 8, src, in_row ? 16 : 0);
  }
  const int num_tiles = end > begin ? (end - begin + kKeys - 1) / kKeys : 0;
  // kThreadsPerKey threads per candidate, each resolving it and copying every kThreadsPerKey-th 16-byte chunk.
  // Keys an entry or nothing fills get zeros here (an entry's row is written from the staging tile later), so
  // that P V adds nothing from padding.
  auto load_tile = [&](int tile, int stage) {
    const int r = threadIdx.x / kThreadsPerKey;
    const int sub = threadIdx.x % kThreadsPerKey;
    bool entry = false;
    const int c = begin + tile * kKeys + r;
    const void* src = c < end ? candidate_source(p, cands, token, c, entry) : nullptr;
    __nv_bfloat16* row = k_smem + (stage * kKeys + r) * stride;
    const bool key = src && !entry;
    for (int chunk = sub; chunk < chunks_per_row; chunk += kThreadsPerKey) {
      const bool in_row = key && chunk * 8 < dim;
      if constexpr (Fp8) {
        const uint2 codes = in_row ? *reinterpret_cast<const uint2*>(static_cast<const __nv_fp8_e4m3*>(src) + chunk * 8)
                                   : make_uint2(0, 0);
        store_dequantized8(codes, p.key_scale, row + chunk * 8);
      } else {
        const __nv_bfloat16* from = in_row ? static_cast<const __nv_bfloat16*>(src) + chunk * 8 : p.keys;
        cp_async_16(row + chunk * 8, from, in_row ? 16 : 0);
      }
    }
    if (entry) {
      for (int chunk = sub; chunk < dim / 4; chunk += kThreadsPerKey) {
        cp_async_16(staging + r * dim + chunk * 4, static_cast<const float*>(src) + chunk * 4);
      }
    }
    if (sub == 0) {
      key_valid[stage][r] = src != nullptr;
      key_is_entry[r] = entry;
    }
  };
  // The staged entries of the tile in `stage`, rounded into their rows (padding columns zero).
  auto convert_entries = [&](int stage) {
    for (int i = threadIdx.x; i < kKeys * chunks_per_row; i += blockDim.x) {
      const int r = i / chunks_per_row;
      const int chunk = i % chunks_per_row;
      if (!key_is_entry[r]) continue;
      float v[8] = {};
      if (chunk * 8 < dim) {
        const float4 lo = *reinterpret_cast<const float4*>(staging + r * dim + chunk * 8);
        const float4 hi = *reinterpret_cast<const float4*>(staging + r * dim + chunk * 8 + 4);
        v[0] = lo.x, v[1] = lo.y, v[2] = lo.z, v[3] = lo.w, v[4] = hi.x, v[5] = hi.y, v[6] = hi.z, v[7] = hi.w;
      }
      store_f32x8(k_smem + (stage * kKeys + r) * stride + chunk * 8, v);
    }
  };
  if (num_tiles > 0) load_tile(0, 0);
  cp_async_commit();

  const float score_scale = p.scale * kLog2e;
  shared_kv::Rows<kChunksPerWarp> rows(place, dim);
  if (!Split && p.sinks) {
    // The sink is one more logit in the softmax, with nothing to add to O: a starting maximum for both halves and
    // its exp (1 at that maximum) counted once.
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      rows.row_max[h] = p.sinks[head0 + min(place.row(h), num_rows - 1)] * kLog2e;
      rows.row_sum[h] = place.half == 0 && place.quad_col == 0 ? 1.0f : 0.0f;
    }
  }

  for (int tile = 0; tile < num_tiles; ++tile) {
    const int stage = tile & 1;
    cp_async_wait<0>();
    __syncthreads();
    convert_entries(stage);
    __syncthreads();
    if (tile + 1 < num_tiles) load_tile(tile + 1, stage ^ 1);
    cp_async_commit();
    const auto valid = [&](int key, int) { return key_valid[stage][key]; };
    shared_kv::attend_tile(place, q_smem, k_smem + stage * kKeys * stride, p_smem, stride, dim16, score_scale,
                           half_max, valid, rows);
  }
  cp_async_wait<0>();

  const auto out_row = [&](int r) {
    return Split ? (static_cast<int64_t>(token) * gridDim.z + blockIdx.z) * p.num_heads + head0 + r
                 : static_cast<int64_t>(token) * p.num_heads + head0 + r;
  };
  shared_kv::finish_rows(
      place, rows, half_sum, num_rows, dim,
      [&](int r, int column, float lo, float hi) {
        if (Split) {
          *reinterpret_cast<float2*>(p.partial_out + out_row(r) * dim + column) = make_float2(lo, hi);
        } else {
          *reinterpret_cast<__nv_bfloat162*>(p.out + out_row(r) * dim + column) = __floats2bfloat162_rn(lo, hi);
        }
      },
      [&](int r, float lse) {
        if (Split) p.partial_lse[out_row(r)] = lse;
      });
}

constexpr int kMergeThreads = 128;

// Grid (tokens, heads, dim chunks of 128): the splits' partial results of a (token, head) under one softmax with its
// sink. The first warp turns the splits' log-sum-exps into weights (a lane per split); then each thread sums one
// dim over the splits, whose loads are independent: a loop that exponentiated and loaded split after split waited
// on memory at every step (about 20 us a call at batch 1).
static_assert(kMaxSplits <= 32, "a lane per split");
__global__ void __launch_bounds__(kMergeThreads)
    compressed_attention_merge_kernel(const CompressedAttentionParams p, int num_splits) {
  __shared__ float split_weight[kMaxSplits];
  __shared__ float scale;
  wait_for_prior_grids();
  allow_dependent_grids();
  const int token = blockIdx.x, head = blockIdx.y;
  const auto row = [&](int s) { return (static_cast<int64_t>(token) * num_splits + s) * p.num_heads + head; };
  if (threadIdx.x < 32) {
    const int lane = threadIdx.x;
    const float lse = lane < num_splits ? p.partial_lse[row(lane)] : -INFINITY;
    const float sink = p.sinks ? p.sinks[head] * kLog2e : -INFINITY;
    float max_lse = fmaxf(lse, sink);
    for (int offset = 16; offset > 0; offset /= 2) {
      max_lse = fmaxf(max_lse, __shfl_xor_sync(0xffffffffu, max_lse, offset));
    }
    const float w = lse == -INFINITY ? 0.0f : fast_exp2(lse - max_lse);
    float denominator = w;
    for (int offset = 16; offset > 0; offset /= 2) denominator += __shfl_xor_sync(0xffffffffu, denominator, offset);
    if (lane < kMaxSplits) split_weight[lane] = w;
    if (lane == 0) {
      if (sink != -INFINITY) denominator += fast_exp2(sink - max_lse);
      scale = max_lse == -INFINITY ? 0.0f : 1.0f / denominator;  // nothing to attend: zeros
    }
  }
  __syncthreads();
  const int d = blockIdx.z * kMergeThreads + threadIdx.x;
  if (d >= p.head_dim) return;
  float sum = 0.0f;
#pragma unroll 8
  for (int s = 0; s < num_splits; ++s) sum += split_weight[s] * p.partial_out[row(s) * p.head_dim + d];
  p.out[(static_cast<int64_t>(token) * p.num_heads + head) * p.head_dim + d] = __float2bfloat16(sum * scale);
}

template <int MaxDim, bool Split, bool Fp8>
void launch_tiles(const CompressedAttentionParams& p, int num_splits, cudaStream_t stream) {
  auto kernel = compressed_attention_kernel<MaxDim, Split, Fp8>;
  // The largest dim's bytes, so that the attribute never changes between launches (nor graph replays).
  constexpr size_t kMaxShared = shared_bytes(kMaxCompressedHeadDim);
  const cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kMaxShared);
  if (err != cudaSuccess) throw std::runtime_error(std::string("compressed_attention: ") + cudaGetErrorString(err));
  const dim3 grid(p.tokens.num_tokens, (p.num_heads + kRows - 1) / kRows, num_splits);
  launch_dependent("compressed_attention", kernel, grid, kThreads, shared_bytes(p.head_dim), stream, p);
}

// The tile kernel of the head dim and the cache's dtype.
template <bool Split>
void launch_tiles_of(const CompressedAttentionParams& p, int num_splits, cudaStream_t stream) {
  if (p.key_codes) {
    p.head_dim <= 128 ? launch_tiles<128, Split, true>(p, num_splits, stream)
                      : launch_tiles<512, Split, true>(p, num_splits, stream);
  } else {
    p.head_dim <= 128 ? launch_tiles<128, Split, false>(p, num_splits, stream)
                      : launch_tiles<512, Split, false>(p, num_splits, stream);
  }
}

}  // namespace

int compressed_attention_splits(int num_tokens) {
  return num_tokens <= 0 ? 1 : std::max(1, std::min(kMaxSplits, kTargetBlocks / num_tokens));
}

void launch_compressed_attention(const CompressedAttentionParams& p, cudaStream_t stream) {
  v4::check_tokens(p.tokens, "compressed_attention");
  if (p.head_dim <= 0 || p.head_dim % 8 != 0 || p.head_dim > kMaxCompressedHeadDim || p.num_heads <= 0 ||
      p.num_heads > 65535 * kRows) {
    throw std::invalid_argument("compressed_attention: head dim must be a multiple of 8 up to " +
                                std::to_string(kMaxCompressedHeadDim) + ", heads positive");
  }
  if (p.compress_rate < 0 || p.sliding_window < 0 || (p.selected && p.top_k <= 0)) {
    throw std::invalid_argument("compressed_attention: negative compress rate or window, or no top_k for selections");
  }
  if (p.compress_rate > 0 && (!p.states || p.entry_offset < 0 || p.entry_offset + p.head_dim > p.state_dim ||
                              p.state_dim % 4 != 0 || p.entry_offset % 4 != 0)) {
    throw std::invalid_argument(
        "compressed_attention: the entries lie outside the state row or off 16-byte boundaries");
  }
  const int num_splits = compressed_attention_splits(p.tokens.num_tokens);
  if (num_splits > 1 && (!p.partial_out || !p.partial_lse)) {
    throw std::invalid_argument("compressed_attention: split candidates need the partial-result workspace");
  }
  if (!p.keys == !p.key_codes) {
    throw std::invalid_argument("compressed_attention: bf16 keys or FP8 key codes, one of the two");
  }
  if (p.tokens.num_tokens == 0) return;
  if (num_splits == 1) {
    launch_tiles_of<false>(p, 1, stream);
    return;
  }
  launch_tiles_of<true>(p, num_splits, stream);
  const dim3 merge_grid(p.tokens.num_tokens, p.num_heads, (p.head_dim + kMergeThreads - 1) / kMergeThreads);
  launch_dependent("compressed_attention (merge)", compressed_attention_merge_kernel, merge_grid, kMergeThreads, 0,
                   stream, p, num_splits);
}

}  // namespace tern::kernels
