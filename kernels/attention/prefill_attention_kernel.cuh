#pragma once
// One block of 8 warps per (query tile of 128 rows, head); warp w owns rows [16w, 16w + 16). Keys and values
// stream through two shared-memory stages of 64 tokens (cp.async, gathered through the block table); S = Q K^T and
// O += P V run on mma.m16n8k16 with ldmatrix fragments; the online softmax runs in the log2 domain on the
// accumulator fragments, so P never leaves registers.
#include <cmath>
#include <stdexcept>
#include <string>

#include "attention/prefill_attention.h"
#include "common/device_math.cuh"

namespace tern::kernels {

namespace prefill {

constexpr int kTileRows = kPrefillTileRows;
constexpr int kTileKeys = 64;
constexpr int kNumWarps = kTileRows / 16;
constexpr float kLog2e = 1.4426950408889634f;

template <int HeadDim>
struct Layout {
  static constexpr int kRowStride = HeadDim + 8;  // 16 bytes of padding: ldmatrix rows hit distinct banks
  static constexpr int kChunksPerRow = HeadDim / 8;
  static constexpr int kQElems = kTileRows * kRowStride;
  static constexpr int kKvElems = kTileKeys * kRowStride;
  static constexpr size_t kSharedBytes = (kQElems + 4 * kKvElems) * sizeof(__nv_bfloat16);
};

template <int HeadDim>
__global__ void __launch_bounds__(kNumWarps * 32, 1) tile_kernel(const PrefillAttentionParams p) {
  using L = Layout<HeadDim>;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __nv_bfloat16* q_smem = reinterpret_cast<__nv_bfloat16*>(smem_raw);
  __nv_bfloat16* k_smem = q_smem + L::kQElems;       // [2 stages][kTileKeys][kRowStride]
  __nv_bfloat16* v_smem = k_smem + 2 * L::kKvElems;  // [2 stages][kTileKeys][kRowStride]

  const AttentionShape& s = p.shape;
  const int tile = blockIdx.x;
  const int head = blockIdx.y;
  const int kv_head = head / (s.num_heads / s.num_kv_heads);
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int quad_row = lane / 4;  // row within the 8-row half of an mma fragment
  const int quad_col = lane % 4;

  const int seq = p.tile_seq[tile];
  const int row0 = p.tile_row[tile];
  const int seq_first_token = p.batch.cu_seqlens[seq];
  const int num_new = p.batch.cu_seqlens[seq + 1] - seq_first_token;
  const int num_cached = p.batch.num_cached_tokens[seq];
  const int num_rows = min(kTileRows, num_new - row0);
  const int min_qpos = num_cached + row0;
  const int max_qpos = min_qpos + num_rows - 1;
  const int kv_end = max_qpos + 1;
  const int kv_begin = s.sliding_window > 0 ? max(0, min_qpos - s.sliding_window + 1) : 0;
  const int first_kv_tile = kv_begin / kTileKeys;
  const int end_kv_tile = (kv_end + kTileKeys - 1) / kTileKeys;

  // Queries of this tile.
  for (int i = threadIdx.x; i < kTileRows * L::kChunksPerRow; i += blockDim.x) {
    const int r = i / L::kChunksPerRow;
    const int c = i % L::kChunksPerRow;
    const bool valid = r < num_rows;
    const __nv_bfloat16* src =
        valid ? p.query + (static_cast<int64_t>(seq_first_token + row0 + r) * s.num_heads + head) * HeadDim + c * 8
              : p.query;
    cp_async_16(q_smem + r * L::kRowStride + c * 8, src, valid ? 16 : 0);
  }
  // Four threads per key row: one block-table lookup per row and thread, then every fourth 16-byte chunk.
  constexpr int kThreadsPerRow = kNumWarps * 32 / kTileKeys;
  auto load_kv_tile = [&](int kv_tile, int stage) {
    const int r = threadIdx.x / kThreadsPerRow;
    const int pos = kv_tile * kTileKeys + r;
    // Keys before kv_begin (the tile's start rounded down) are outside every row's window, and a sliding-window
    // group's table holds -1 for their blocks once freed: they are zeros here and masked below.
    const bool valid = pos >= kv_begin && pos < kv_end;
    const int64_t row = valid ? p.kv.row(seq, pos, s.num_kv_heads, kv_head) * HeadDim : 0;
    const int dst = stage * L::kKvElems + r * L::kRowStride;
#pragma unroll
    for (int c = threadIdx.x % kThreadsPerRow; c < L::kChunksPerRow; c += kThreadsPerRow) {
      cp_async_16(k_smem + dst + c * 8, p.kv.keys + row + c * 8, valid ? 16 : 0);
      cp_async_16(v_smem + dst + c * 8, p.kv.values + row + c * 8, valid ? 16 : 0);
    }
  };
  load_kv_tile(first_kv_tile, 0);
  cp_async_commit();

  const float score_scale = s.scale * kLog2e;
  const int warp_row = warp * 16;
  // This thread's two rows (quad_row and quad_row + 8 of the warp's 16); rows past the sequence reuse the last
  // row's position so their softmax stays finite; they are never written.
  const int qpos[2] = {min(min_qpos + warp_row + quad_row, max_qpos), min(min_qpos + warp_row + quad_row + 8, max_qpos)};

  uint32_t q_frag[HeadDim / 16][4];
  float o_acc[HeadDim / 8][4];
#pragma unroll
  for (int i = 0; i < HeadDim / 8; ++i) o_acc[i][0] = o_acc[i][1] = o_acc[i][2] = o_acc[i][3] = 0.0f;
  float row_max[2], row_sum[2];
  const float sink = s.sinks ? s.sinks[head] * kLog2e : -INFINITY;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    row_max[h] = sink;
    row_sum[h] = (s.sinks && quad_col == 0) ? 1.0f : 0.0f;  // the sink's weight, counted once per row
  }

  for (int kv_tile = first_kv_tile; kv_tile < end_kv_tile; ++kv_tile) {
    cp_async_wait<0>();
    __syncthreads();
    if (kv_tile == first_kv_tile) {
#pragma unroll
      for (int kk = 0; kk < HeadDim / 16; ++kk) {
        ldmatrix_x4(q_frag[kk], q_smem + (warp_row + lane % 16) * L::kRowStride + kk * 16 + (lane / 16) * 8);
      }
    }
    if (kv_tile + 1 < end_kv_tile) load_kv_tile(kv_tile + 1, (kv_tile + 1 - first_kv_tile) & 1);
    cp_async_commit();
    const int stage = (kv_tile - first_kv_tile) & 1;
    const __nv_bfloat16* k_tile = k_smem + stage * L::kKvElems;
    const __nv_bfloat16* v_tile = v_smem + stage * L::kKvElems;

    float s_acc[kTileKeys / 8][4];
#pragma unroll
    for (int i = 0; i < kTileKeys / 8; ++i) s_acc[i][0] = s_acc[i][1] = s_acc[i][2] = s_acc[i][3] = 0.0f;
    const int mat = lane / 8;
    const int mat_row = lane % 8;
#pragma unroll
    for (int kk = 0; kk < HeadDim / 16; ++kk) {
#pragma unroll
      for (int nn = 0; nn < kTileKeys / 16; ++nn) {
        uint32_t b[4];
        ldmatrix_x4(b, k_tile + (nn * 16 + (mat / 2) * 8 + mat_row) * L::kRowStride + kk * 16 + (mat % 2) * 8);
        mma_bf16_16816(s_acc[2 * nn], q_frag[kk], b[0], b[1]);
        mma_bf16_16816(s_acc[2 * nn + 1], q_frag[kk], b[2], b[3]);
      }
    }

    const int first_key = kv_tile * kTileKeys;
    const bool needs_mask = first_key + kTileKeys - 1 > min_qpos ||
                            (s.sliding_window > 0 && first_key <= max_qpos - s.sliding_window);
#pragma unroll
    for (int n = 0; n < kTileKeys / 8; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float v = s_acc[n][e] * score_scale;
        if (needs_mask) {
          const int key = first_key + n * 8 + 2 * quad_col + (e & 1);
          const int qp = qpos[e / 2];
          const bool visible = key <= qp && (s.sliding_window <= 0 || key > qp - s.sliding_window);
          v = visible ? v : -INFINITY;
        }
        s_acc[n][e] = v;
      }
    }

    float correction[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float mx = row_max[h];
#pragma unroll
      for (int n = 0; n < kTileKeys / 8; ++n) mx = fmaxf(mx, fmaxf(s_acc[n][2 * h], s_acc[n][2 * h + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float safe = mx == -INFINITY ? 0.0f : mx;
      correction[h] = fast_exp2(row_max[h] - safe);
      row_max[h] = mx;
      float sum = 0.0f;
#pragma unroll
      for (int n = 0; n < kTileKeys / 8; ++n) {
        s_acc[n][2 * h] = fast_exp2(s_acc[n][2 * h] - safe);
        s_acc[n][2 * h + 1] = fast_exp2(s_acc[n][2 * h + 1] - safe);
        sum += s_acc[n][2 * h] + s_acc[n][2 * h + 1];
      }
      row_sum[h] = row_sum[h] * correction[h] + sum;
    }
#pragma unroll
    for (int i = 0; i < HeadDim / 8; ++i) {
      o_acc[i][0] *= correction[0];
      o_acc[i][1] *= correction[0];
      o_acc[i][2] *= correction[1];
      o_acc[i][3] *= correction[1];
    }

#pragma unroll
    for (int kk = 0; kk < kTileKeys / 16; ++kk) {
      const uint32_t a[4] = {pack_bf16x2(s_acc[2 * kk][0], s_acc[2 * kk][1]),
                             pack_bf16x2(s_acc[2 * kk][2], s_acc[2 * kk][3]),
                             pack_bf16x2(s_acc[2 * kk + 1][0], s_acc[2 * kk + 1][1]),
                             pack_bf16x2(s_acc[2 * kk + 1][2], s_acc[2 * kk + 1][3])};
#pragma unroll
      for (int dn = 0; dn < HeadDim / 16; ++dn) {
        uint32_t b[4];
        ldmatrix_x4_trans(b, v_tile + (kk * 16 + (mat % 2) * 8 + mat_row) * L::kRowStride + dn * 16 + (mat / 2) * 8);
        mma_bf16_16816(o_acc[2 * dn], a, b[0], b[1]);
        mma_bf16_16816(o_acc[2 * dn + 1], a, b[2], b[3]);
      }
    }
  }

#pragma unroll
  for (int h = 0; h < 2; ++h) {
    row_sum[h] += __shfl_xor_sync(0xffffffffu, row_sum[h], 1);
    row_sum[h] += __shfl_xor_sync(0xffffffffu, row_sum[h], 2);
    row_sum[h] = row_sum[h] > 0.0f ? 1.0f / row_sum[h] : 0.0f;
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = warp_row + quad_row + 8 * h;
    if (r >= num_rows) continue;
    __nv_bfloat16* out = p.out + (static_cast<int64_t>(seq_first_token + row0 + r) * s.num_heads + head) * HeadDim;
#pragma unroll
    for (int i = 0; i < HeadDim / 8; ++i) {
      *reinterpret_cast<__nv_bfloat162*>(out + i * 8 + 2 * quad_col) =
          __floats2bfloat162_rn(o_acc[i][2 * h] * row_sum[h], o_acc[i][2 * h + 1] * row_sum[h]);
    }
  }
}

}  // namespace prefill

template <int HeadDim>
void launch_prefill_attention_tiles(const PrefillAttentionParams& params, cudaStream_t stream) {
  constexpr size_t smem = prefill::Layout<HeadDim>::kSharedBytes;
  auto kernel = prefill::tile_kernel<HeadDim>;
  const cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (err != cudaSuccess) throw std::runtime_error(std::string("prefill attention: ") + cudaGetErrorString(err));
  const dim3 grid(params.num_tiles, params.shape.num_heads);
  kernel<<<grid, prefill::kNumWarps * 32, smem, stream>>>(params);
}

}  // namespace tern::kernels
