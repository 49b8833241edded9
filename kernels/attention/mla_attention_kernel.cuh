#pragma once
// One block of 8 warps per 64 query rows ((token, head) pairs) and a range of keys. Warp w owns rows
// [16 (w % 4), 16 (w % 4) + 16) and half w / 4 of the work on them: keys [16 half, 16 half + 16) of each 32-key tile
// for S = Q K^T, and half of the value dims for O += P V, so that the accumulators of a 512-dim value fit in
// registers. The two warps of a row group meet in shared memory twice per tile: for the row maxima of the online
// softmax (both then rescale alike) and for P, which each needs whole. Keys stream through two shared-memory
// stages (cp.async, gathered through the block table); the value tile is the key tile's first value_dim columns.
// Dims that are not multiples of 16 are zero-padded in shared memory.
#include <cmath>
#include <stdexcept>
#include <string>

#include "attention/key_shares.h"
#include "attention/mla_attention.h"
#include "attention/online_softmax.cuh"
#include "common/device_math.cuh"

namespace tern::kernels {

namespace mla {

constexpr int kRows = 64;
constexpr int kKeys = 32;
constexpr int kNumWarps = 8;
constexpr int kPStride = kKeys + 8;  // bf16 P rows, padded like the key rows
constexpr float kLog2e = 1.4426950408889634f;

__host__ __device__ constexpr int padded_dim(int dim) { return (dim + 15) / 16 * 16; }
// 16 bytes of padding per row: ldmatrix rows of a 16-multiple width hit distinct banks.
__host__ __device__ constexpr int row_stride(int key_dim) { return padded_dim(key_dim) + 8; }
constexpr size_t shared_bytes(int key_dim) {
  return static_cast<size_t>((kRows + 2 * kKeys) * row_stride(key_dim) + kRows * kPStride) * sizeof(__nv_bfloat16);
}

template <int MaxValueDim, bool Split>
__global__ void __launch_bounds__(kNumWarps * 32, 1) tile_kernel(const MlaAttentionParams p) {
  constexpr int kChunksPerWarp = (MaxValueDim / 16 + 1) / 2;  // 16-column value chunks of a warp's half
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __shared__ float half_max[2][kRows];
  __shared__ float half_sum[2][kRows];
  __shared__ int row_token[kRows], row_head[kRows], row_pos[kRows];

  const int stride = row_stride(p.key_dim);
  const int dim16 = padded_dim(p.key_dim);
  __nv_bfloat16* q_smem = reinterpret_cast<__nv_bfloat16*>(smem_raw);  // [kRows][stride]
  __nv_bfloat16* k_smem = q_smem + kRows * stride;                      // [2 stages][kKeys][stride]
  __nv_bfloat16* p_smem = k_smem + 2 * kKeys * stride;                  // [kRows][kPStride]

  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int quad_row = lane / 4;
  const int quad_col = lane % 4;
  const int group = warp % 4;
  const int half = warp / 4;
  const int num_heads = p.num_heads;

  // The block's rows and the keys [kv_begin, kv_end) they read; rows past num_rows repeat the last row, so that
  // their softmax stays finite, and are never written.
  int seq, num_rows, kv_begin, kv_end;
  if (Split) {
    const int token = p.item_token[blockIdx.x];
    seq = p.batch.token_seq[token];
    const int position = p.batch.positions[token];
    const int head0 = blockIdx.y * kRows;
    num_rows = min(kRows, num_heads - head0);
    const KeyShare share = key_share<kKeys>(0, position + 1, p.item_chunk[blockIdx.x], p.num_splits);
    kv_begin = share.begin;
    kv_end = share.end;
    if (threadIdx.x < kRows) {
      row_token[threadIdx.x] = token;
      row_head[threadIdx.x] = head0 + min(static_cast<int>(threadIdx.x), num_rows - 1);
      row_pos[threadIdx.x] = position;
    }
  } else {
    seq = p.tile_seq[blockIdx.x];
    const int token0 = p.tile_row[blockIdx.x];
    const int first_token = p.batch.cu_seqlens[seq];
    const int num_new = p.batch.cu_seqlens[seq + 1] - first_token;
    const int num_cached = p.batch.num_cached_tokens[seq];
    // The tile's rows, token-major: row r is head r % num_heads of new token token0 + r / num_heads.
    const int tile_rows = min(kPrefillTileRows, num_new - token0) * num_heads;
    const int row0 = blockIdx.y * kRows;
    if (row0 >= tile_rows) return;  // the tile's last tokens need fewer blocks than the grid has
    num_rows = min(kRows, tile_rows - row0);
    kv_begin = 0;
    kv_end = num_cached + token0 + (row0 + num_rows - 1) / num_heads + 1;
    if (threadIdx.x < kRows) {
      const int r = row0 + min(static_cast<int>(threadIdx.x), num_rows - 1);
      row_token[threadIdx.x] = first_token + token0 + r / num_heads;
      row_head[threadIdx.x] = r % num_heads;
      row_pos[threadIdx.x] = num_cached + token0 + r / num_heads;
    }
  }
  __syncthreads();

  const int chunks_per_row = dim16 / 8;
  for (int i = threadIdx.x; i < kRows * chunks_per_row; i += blockDim.x) {
    const int r = i / chunks_per_row;
    const int c = i % chunks_per_row;
    const bool in_row = c * 8 < p.key_dim;
    const __nv_bfloat16* src =
        p.query + (static_cast<int64_t>(row_token[r]) * num_heads + row_head[r]) * p.key_dim + (in_row ? c * 8 : 0);
    cp_async_16(q_smem + r * stride + c * 8, src, in_row ? 16 : 0);
  }
  const int num_tiles = kv_end > kv_begin ? (kv_end - kv_begin + kKeys - 1) / kKeys : 0;
  // Eight threads per key: one block-table lookup per key and thread, then every eighth 16-byte chunk. Keys past
  // kv_end and the padding columns are zeros, so that P V adds nothing from them.
  constexpr int kThreadsPerKey = kNumWarps * 32 / kKeys;
  auto load_tile = [&](int tile, int stage) {
    const int r = threadIdx.x / kThreadsPerKey;
    const int pos = kv_begin + tile * kKeys + r;
    const bool valid = pos < kv_end;
    const int64_t row = valid ? p.kv.row(seq, pos, 1, 0) * p.key_dim : 0;
    __nv_bfloat16* dst = k_smem + (stage * kKeys + r) * stride;
    for (int c = threadIdx.x % kThreadsPerKey; c < chunks_per_row; c += kThreadsPerKey) {
      const bool in_row = valid && c * 8 < p.key_dim;
      cp_async_16(dst + c * 8, p.kv.keys + row + (in_row ? c * 8 : 0), in_row ? 16 : 0);
    }
  };
  if (num_tiles > 0) load_tile(0, 0);
  cp_async_commit();

  const int warp_row = group * 16;
  const int value_chunks = padded_dim(p.value_dim) / 16;
  const int my_first_chunk = half == 0 ? 0 : (value_chunks + 1) / 2;
  const int my_chunks = half == 0 ? (value_chunks + 1) / 2 : value_chunks / 2;
  const int qpos[2] = {row_pos[warp_row + quad_row], row_pos[warp_row + quad_row + 8]};
  const float score_scale = p.scale * kLog2e;
  const int mat = lane / 8;
  const int mat_row = lane % 8;

  float o_acc[2 * kChunksPerWarp][4];
#pragma unroll
  for (int i = 0; i < 2 * kChunksPerWarp; ++i) o_acc[i][0] = o_acc[i][1] = o_acc[i][2] = o_acc[i][3] = 0.0f;
  float row_max[2] = {-INFINITY, -INFINITY};
  float row_sum[2] = {0.0f, 0.0f};  // this warp's keys only; the halves' sums are added at the end

  for (int tile = 0; tile < num_tiles; ++tile) {
    cp_async_wait<0>();
    __syncthreads();
    if (tile + 1 < num_tiles) load_tile(tile + 1, (tile + 1) & 1);
    cp_async_commit();
    const __nv_bfloat16* k_tile = k_smem + (tile & 1) * kKeys * stride;

    float s_acc[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
    for (int kk = 0; kk < dim16 / 16; ++kk) {
      uint32_t a[4], b[4];
      ldmatrix_x4(a, q_smem + (warp_row + lane % 16) * stride + kk * 16 + (lane / 16) * 8);
      ldmatrix_x4(b, k_tile + (half * 16 + (mat / 2) * 8 + mat_row) * stride + kk * 16 + (mat % 2) * 8);
      mma_bf16_16816(s_acc[0], a, b[0], b[1]);
      mma_bf16_16816(s_acc[1], a, b[2], b[3]);
    }

    const int first_key = kv_begin + tile * kKeys + half * 16;
    float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int n = 0; n < 2; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = first_key + n * 8 + 2 * quad_col + (e & 1);
        const float v = key < kv_end && key <= qpos[e / 2] ? s_acc[n][e] * score_scale : -INFINITY;
        s_acc[n][e] = v;
        tile_max[e / 2] = fmaxf(tile_max[e / 2], v);
      }
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      tile_max[h] = fmaxf(tile_max[h], __shfl_xor_sync(0xffffffffu, tile_max[h], 1));
      tile_max[h] = fmaxf(tile_max[h], __shfl_xor_sync(0xffffffffu, tile_max[h], 2));
      if (quad_col == 0) half_max[half][warp_row + quad_row + 8 * h] = tile_max[h];
    }
    __syncthreads();

    float correction[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      // Both warps of the row group take the same maximum, so their accumulators are rescaled alike.
      const float m_new = fmaxf(row_max[h], fmaxf(tile_max[h], half_max[1 - half][warp_row + quad_row + 8 * h]));
      correction[h] = online_softmax_row(s_acc, h, m_new, row_max[h], row_sum[h]);
    }
    __nv_bfloat16* p_row = p_smem + (warp_row + quad_row) * kPStride + half * 16 + 2 * quad_col;
#pragma unroll
    for (int n = 0; n < 2; ++n) {
      *reinterpret_cast<__nv_bfloat162*>(p_row + n * 8) = __floats2bfloat162_rn(s_acc[n][0], s_acc[n][1]);
      *reinterpret_cast<__nv_bfloat162*>(p_row + 8 * kPStride + n * 8) =
          __floats2bfloat162_rn(s_acc[n][2], s_acc[n][3]);
    }
#pragma unroll
    for (int i = 0; i < 2 * kChunksPerWarp; ++i) {
      o_acc[i][0] *= correction[0];
      o_acc[i][1] *= correction[0];
      o_acc[i][2] *= correction[1];
      o_acc[i][3] *= correction[1];
    }
    __syncthreads();

#pragma unroll
    for (int kk = 0; kk < kKeys / 16; ++kk) {
      uint32_t a[4];
      ldmatrix_x4(a, p_smem + (warp_row + lane % 16) * kPStride + kk * 16 + (lane / 16) * 8);
#pragma unroll
      for (int j = 0; j < kChunksPerWarp; ++j) {
        if (j < my_chunks) {
          const int column = (my_first_chunk + j) * 16;
          uint32_t b[4];
          ldmatrix_x4_trans(b, k_tile + (kk * 16 + (mat % 2) * 8 + mat_row) * stride + column + (mat / 2) * 8);
          mma_bf16_16816(o_acc[2 * j], a, b[0], b[1]);
          mma_bf16_16816(o_acc[2 * j + 1], a, b[2], b[3]);
        }
      }
    }
  }
  cp_async_wait<0>();

#pragma unroll
  for (int h = 0; h < 2; ++h) {
    row_sum[h] += __shfl_xor_sync(0xffffffffu, row_sum[h], 1);
    row_sum[h] += __shfl_xor_sync(0xffffffffu, row_sum[h], 2);
    if (quad_col == 0) half_sum[half][warp_row + quad_row + 8 * h] = row_sum[h];
  }
  __syncthreads();

#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = warp_row + quad_row + 8 * h;
    if (r >= num_rows) continue;
    const float total = row_sum[h] + half_sum[1 - half][r];
    const float inv = total > 0.0f ? 1.0f / total : 0.0f;
    const int64_t out_row = Split ? static_cast<int64_t>(blockIdx.x) * num_heads + row_head[r]
                                  : static_cast<int64_t>(row_token[r]) * num_heads + row_head[r];
#pragma unroll
    for (int j = 0; j < kChunksPerWarp; ++j) {
#pragma unroll
      for (int t = 0; t < 2; ++t) {
        const int column = (my_first_chunk + j) * 16 + t * 8 + 2 * quad_col;
        if (j >= my_chunks || column >= p.value_dim) continue;
        const float lo = o_acc[2 * j + t][2 * h] * inv;
        const float hi = o_acc[2 * j + t][2 * h + 1] * inv;
        if (Split) {
          *reinterpret_cast<float2*>(p.partial_out + out_row * p.value_dim + column) = make_float2(lo, hi);
        } else {
          *reinterpret_cast<__nv_bfloat162*>(p.out + out_row * p.value_dim + column) = __floats2bfloat162_rn(lo, hi);
        }
      }
    }
    if (Split && half == 0 && quad_col == 0) {
      p.partial_lse[out_row] = total > 0.0f ? row_max[h] + log2f(total) : -INFINITY;
    }
  }
}

template <int MaxValueDim, bool Split>
void launch_tiles(const MlaAttentionParams& params, cudaStream_t stream) {
  auto kernel = tile_kernel<MaxValueDim, Split>;
  // The largest key dim's bytes, so that the attribute never has to change between launches (nor graph replays).
  constexpr size_t kMaxShared = shared_bytes(kMlaMaxKeyDim);
  const cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kMaxShared);
  if (err != cudaSuccess) throw std::runtime_error(std::string("MLA attention: ") + cudaGetErrorString(err));
  const int row_blocks = ((Split ? 1 : kPrefillTileRows) * params.num_heads + kRows - 1) / kRows;
  const dim3 grid(Split ? params.num_items : params.num_tiles, row_blocks);
  kernel<<<grid, kNumWarps * 32, shared_bytes(params.key_dim), stream>>>(params);
}

}  // namespace mla

template <int MaxValueDim>
void launch_mla_attention_tiles(const MlaAttentionParams& params, bool split, cudaStream_t stream) {
  if (split) {
    mla::launch_tiles<MaxValueDim, true>(params, stream);
  } else {
    mla::launch_tiles<MaxValueDim, false>(params, stream);
  }
}

}  // namespace tern::kernels
