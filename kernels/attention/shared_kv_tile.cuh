#pragma once
// The tile loop's arithmetic of the attention kernels whose query rows all read the same keys: MLA in its absorbed
// form (mla_attention_kernel.cuh) and DeepSeek-V4's shared K = V head (v4/compressed_attention.cu). A block of 8
// warps holds 64 query rows in shared memory; warp w owns rows [16 (w % 4), +16) and half w / 4 of the work on
// them: keys [16 half, +16) of each 32-key tile for S = Q K^T, and half of the value dims for O += P V, so that the
// accumulators of a 512-dim value fit in registers. The two warps of a row group meet in shared memory twice per
// tile: for the row maxima of the online softmax (both then rescale alike) and for P, which each needs whole. The
// value tile is the key tile's first value dims. Rows of 16-multiple width padded by 16 bytes (row_stride), so that
// ldmatrix rows hit distinct banks.
#include <cuda_bf16.h>

#include <cmath>

#include "attention/online_softmax.cuh"
#include "common/device_math.cuh"

namespace tern::kernels::shared_kv {

constexpr int kRows = 64;
constexpr int kKeys = 32;
constexpr int kNumWarps = 8;
constexpr int kThreads = kNumWarps * 32;
constexpr int kPStride = kKeys + 8;  // bf16 P rows, padded like the key rows
constexpr float kLog2e = 1.4426950408889634f;

__host__ __device__ constexpr int padded_dim(int dim) { return (dim + 15) / 16 * 16; }
__host__ __device__ constexpr int row_stride(int dim) { return padded_dim(dim) + 8; }

// A thread's place in the block's mma layout.
struct Place {
  int lane, quad_row, quad_col, half, warp_row, mat, mat_row;
  __device__ Place()
      : lane(threadIdx.x % 32),
        quad_row(lane / 4),
        quad_col(lane % 4),
        half(threadIdx.x / 32 / 4),
        warp_row(threadIdx.x / 32 % 4 * 16),
        mat(lane / 8),
        mat_row(lane % 8) {}
  // The first block row of the thread's row half h (0: rows quad_row, 1: quad_row + 8 of the warp's 16).
  __device__ int row(int h) const { return warp_row + quad_row + 8 * h; }
};

// A warp's running softmax and O accumulators over its half of the value dims (ChunksPerWarp 16-column chunks).
template <int ChunksPerWarp>
struct Rows {
  float o_acc[2 * ChunksPerWarp][4];
  float row_max[2] = {-INFINITY, -INFINITY};  // log2 domain
  float row_sum[2] = {0.0f, 0.0f};            // this warp's keys only; the halves' sums meet at the end
  int first_chunk, num_chunks;

  __device__ Rows(const Place& place, int value_dim) {
    const int value_chunks = padded_dim(value_dim) / 16;
    first_chunk = place.half == 0 ? 0 : (value_chunks + 1) / 2;
    num_chunks = place.half == 0 ? (value_chunks + 1) / 2 : value_chunks / 2;
#pragma unroll
    for (int i = 0; i < 2 * ChunksPerWarp; ++i) o_acc[i][0] = o_acc[i][1] = o_acc[i][2] = o_acc[i][3] = 0.0f;
  }
};

// One tile of kKeys keys in shared memory (k_tile, rows of `stride`): scores of the warp's rows against its half of
// the keys over key_dim16 dims, masked where valid(key in the tile, row half) is false, the online softmax, then
// O += P V. Starts after a barrier that made the tile visible; leaves shared memory free to refill after the next.
template <int ChunksPerWarp, typename Valid>
__device__ __forceinline__ void attend_tile(const Place& place, const __nv_bfloat16* q_smem,
                                            const __nv_bfloat16* k_tile, __nv_bfloat16* p_smem, int stride,
                                            int key_dim16, float score_scale, float (&half_max)[2][kRows],
                                            const Valid& valid, Rows<ChunksPerWarp>& rows) {
  const int lane = place.lane, half = place.half, warp_row = place.warp_row;
  float s_acc[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
  for (int kk = 0; kk < key_dim16 / 16; ++kk) {
    uint32_t a[4], b[4];
    ldmatrix_x4(a, q_smem + (warp_row + lane % 16) * stride + kk * 16 + (lane / 16) * 8);
    ldmatrix_x4(b, k_tile + (half * 16 + (place.mat / 2) * 8 + place.mat_row) * stride + kk * 16 +
                       (place.mat % 2) * 8);
    mma_bf16_16816(s_acc[0], a, b[0], b[1]);
    mma_bf16_16816(s_acc[1], a, b[2], b[3]);
  }

  float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int n = 0; n < 2; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int key = half * 16 + n * 8 + 2 * place.quad_col + (e & 1);
      const float v = valid(key, e / 2) ? s_acc[n][e] * score_scale : -INFINITY;
      s_acc[n][e] = v;
      tile_max[e / 2] = fmaxf(tile_max[e / 2], v);
    }
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    tile_max[h] = fmaxf(tile_max[h], __shfl_xor_sync(0xffffffffu, tile_max[h], 1));
    tile_max[h] = fmaxf(tile_max[h], __shfl_xor_sync(0xffffffffu, tile_max[h], 2));
    if (place.quad_col == 0) half_max[half][place.row(h)] = tile_max[h];
  }
  __syncthreads();

  float correction[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    // Both warps of the row group take the same maximum, so their accumulators are rescaled alike.
    const float m_new = fmaxf(rows.row_max[h], fmaxf(tile_max[h], half_max[1 - half][place.row(h)]));
    correction[h] = online_softmax_row(s_acc, h, m_new, rows.row_max[h], rows.row_sum[h]);
  }
  __nv_bfloat16* p_row = p_smem + (warp_row + place.quad_row) * kPStride + half * 16 + 2 * place.quad_col;
#pragma unroll
  for (int n = 0; n < 2; ++n) {
    *reinterpret_cast<__nv_bfloat162*>(p_row + n * 8) = __floats2bfloat162_rn(s_acc[n][0], s_acc[n][1]);
    *reinterpret_cast<__nv_bfloat162*>(p_row + 8 * kPStride + n * 8) = __floats2bfloat162_rn(s_acc[n][2], s_acc[n][3]);
  }
#pragma unroll
  for (int i = 0; i < 2 * ChunksPerWarp; ++i) {
    rows.o_acc[i][0] *= correction[0];
    rows.o_acc[i][1] *= correction[0];
    rows.o_acc[i][2] *= correction[1];
    rows.o_acc[i][3] *= correction[1];
  }
  __syncthreads();

#pragma unroll
  for (int kk = 0; kk < kKeys / 16; ++kk) {
    uint32_t a[4];
    ldmatrix_x4(a, p_smem + (warp_row + lane % 16) * kPStride + kk * 16 + (lane / 16) * 8);
#pragma unroll
    for (int j = 0; j < ChunksPerWarp; ++j) {
      if (j < rows.num_chunks) {
        const int column = (rows.first_chunk + j) * 16;
        uint32_t b[4];
        ldmatrix_x4_trans(b, k_tile + (kk * 16 + (place.mat % 2) * 8 + place.mat_row) * stride + column +
                                 (place.mat / 2) * 8);
        mma_bf16_16816(rows.o_acc[2 * j], a, b[0], b[1]);
        mma_bf16_16816(rows.o_acc[2 * j + 1], a, b[2], b[3]);
      }
    }
  }
}

// After the last tile: each of the first num_rows block rows normalized by the sum of both halves' exps.
// store_pair(row, column, lo, hi) gets every pair of value dims below value_dim; store_lse(row, lse) the row's
// log-sum-exp (log2 domain, -inf without keys) once per row.
template <int ChunksPerWarp, typename StorePair, typename StoreLse>
__device__ __forceinline__ void finish_rows(const Place& place, Rows<ChunksPerWarp>& rows, float (&half_sum)[2][kRows],
                                            int num_rows, int value_dim, const StorePair& store_pair,
                                            const StoreLse& store_lse) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    rows.row_sum[h] += __shfl_xor_sync(0xffffffffu, rows.row_sum[h], 1);
    rows.row_sum[h] += __shfl_xor_sync(0xffffffffu, rows.row_sum[h], 2);
    if (place.quad_col == 0) half_sum[place.half][place.row(h)] = rows.row_sum[h];
  }
  __syncthreads();
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = place.row(h);
    if (r >= num_rows) continue;
    const float total = rows.row_sum[h] + half_sum[1 - place.half][r];
    const float inv = total > 0.0f ? 1.0f / total : 0.0f;
#pragma unroll
    for (int j = 0; j < ChunksPerWarp; ++j) {
#pragma unroll
      for (int t = 0; t < 2; ++t) {
        const int column = (rows.first_chunk + j) * 16 + t * 8 + 2 * place.quad_col;
        if (j >= rows.num_chunks || column >= value_dim) continue;
        store_pair(r, column, rows.o_acc[2 * j + t][2 * h] * inv, rows.o_acc[2 * j + t][2 * h + 1] * inv);
      }
    }
    if (place.half == 0 && place.quad_col == 0) {
      store_lse(r, total > 0.0f ? rows.row_max[h] + log2f(total) : -INFINITY);
    }
  }
}

}  // namespace tern::kernels::shared_kv
