#pragma once
// The tensor-core split-KV kernel for head_dim 64 and 128: one block of `Warps` warps per (work item, KV head). The GQA
// group's query heads, padded with zeros to 16 rows, are the A operand of mma.m16n8k16; keys and values stream
// through shared memory in tiles of 16 keys per warp, Stages deep, and warp w takes keys [16w, 16w + 16) of every
// tile: S = Q K^T, the online softmax and O += P V stay in registers. At the end the warps' partial
// results are merged by their log-sum-exp through shared memory. Each K/V byte crosses device memory once per
// group and shared memory once per block, so the arithmetic stays far below the memory time (the CUDA-core kernel
// re-read every tile once per warp and was bound by FMAs and shared-memory traffic). The tiles come in by bulk
// copies (the copy engine), one per key row and tensor, completing on a per-stage mbarrier (with 16-byte cp.async
// the same kernel streamed about 20 GB/s per SM on the H200 at best, against 32 for the copy bandwidth).
#include <cmath>
#include <stdexcept>
#include <string>

#include "attention/decode_attention.h"
#include "common/dependent_launch.cuh"
#include "common/device_math.cuh"

namespace tern::kernels {

namespace decode_mma {

constexpr int kRows = 16;  // query heads of the group, zero-padded: the mma's M
constexpr int kWarpKeys = 16;
// On the H200 a block streamed 10-12 GB/s whatever its pipeline depth (2, 3 or 6 stages), so the bandwidth comes
// from blocks per SM: 4 warps and 2 stages (64-key tiles) fit three blocks per SM for head_dim 128.
constexpr int kDefaultWarps = 4;
constexpr int kDefaultStages = 2;
constexpr float kLog2e = 1.4426950408889634f;

template <int HeadDim, int Warps, int Stages>
struct Layout {
  static constexpr int kTileKeys = kWarpKeys * Warps;
  static constexpr int kRowStride = HeadDim + 8;  // 16 bytes of padding: ldmatrix rows hit distinct banks
  static constexpr int kChunksPerRow = HeadDim / 8;
  static constexpr int kTileElems = kTileKeys * kRowStride;
  static constexpr size_t kQBytes = kRows * kRowStride * sizeof(__nv_bfloat16);
  static constexpr size_t kPipelineBytes = 2 * Stages * kTileElems * sizeof(__nv_bfloat16);
  // After the loop the pipeline's space holds each warp's O rows, row maxima and row sums for the merge.
  static constexpr size_t kMergeBytes = Warps * kRows * (HeadDim + 2) * sizeof(float);
  static constexpr size_t kSharedBytes = kQBytes + (kPipelineBytes > kMergeBytes ? kPipelineBytes : kMergeBytes);
};

template <int HeadDim, int Warps, int Stages>
__global__ void __launch_bounds__(Warps * 32) chunk_kernel(const DecodeAttentionParams p) {
  using L = Layout<HeadDim, Warps, Stages>;
  constexpr int kTileKeys = L::kTileKeys;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __nv_bfloat16* q_smem = reinterpret_cast<__nv_bfloat16*>(smem_raw);
  __nv_bfloat16* k_tiles = q_smem + kRows * L::kRowStride;  // [Stages][kTileKeys][kRowStride]
  __nv_bfloat16* v_tiles = k_tiles + Stages * L::kTileElems;
  float* merge_o = reinterpret_cast<float*>(k_tiles);  // [warp][row][HeadDim], once the tiles are consumed
  float* merge_max = merge_o + Warps * kRows * HeadDim;
  float* merge_sum = merge_max + Warps * kRows;

  __shared__ uint64_t tile_ready[Stages];  // one mbarrier per stage: its keys and values have landed

  // Before the wait (dependent_launch.cuh): the split plan and the batch when it is step metadata, and the first
  // tiles' rows that earlier steps cached; after it, the queries and this step's rows, which the kernels before
  // write.
  if (!p.batch_from_host) wait_for_prior_grids();
  const int item = blockIdx.x;
  const int kv_head = blockIdx.y;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int quad_row = lane / 4;
  const int quad_col = lane % 4;
  const AttentionShape& s = p.shape;
  const int group = s.num_heads / s.num_kv_heads;

  const int token = p.item_token[item];
  const int chunk = p.item_chunk[item];
  const int seq = p.batch.token_seq[token];
  const int position = p.batch.positions[token];
  const int window_begin = s.sliding_window > 0 ? max(0, position - s.sliding_window + 1) : 0;
  // Share `chunk` of num_splits equal shares (whole tiles) of the keys [window_begin, position].
  const int num_keys = position + 1 - window_begin;
  const int split_tokens = ((num_keys + p.num_splits - 1) / p.num_splits + kTileKeys - 1) / kTileKeys * kTileKeys;
  const int kv_begin = window_begin + chunk * split_tokens;
  const int kv_end = min(kv_begin + split_tokens, position + 1);
  const int num_tiles = kv_end > kv_begin ? (kv_end - kv_begin + kTileKeys - 1) / kTileKeys : 0;

  if (threadIdx.x == 0) {
    for (int stage = 0; stage < Stages; ++stage) mbarrier_init(&tile_ready[stage], kTileKeys);
    mbarrier_init_fence();
  }
  __syncthreads();

  // Thread r < kTileKeys brings key row r of a tile: one block-table lookup, one bulk copy each for its key and
  // value. Rows past the share repeat the share's last key, whose scores are masked to weight 0, so that P V
  // never multiplies garbage.
  const int32_t* table = p.kv.block_tables + p.kv.block_table_offsets[seq];
  constexpr uint32_t kRowBytes = HeadDim * sizeof(__nv_bfloat16);
  const auto tile_position = [&](int tile) {
    return min(kv_begin + tile * kTileKeys + static_cast<int>(threadIdx.x), kv_end - 1);
  };
  const auto load_row = [&](int stage, int pos) {
    const int64_t slot = static_cast<int64_t>(table[pos / p.kv.block_size]) * p.kv.block_size + pos % p.kv.block_size;
    const int64_t row = (slot * s.num_kv_heads + kv_head) * HeadDim;
    const int dst = stage * L::kTileElems + threadIdx.x * L::kRowStride;
    mbarrier_arrive_expect_tx(&tile_ready[stage], 2 * kRowBytes);
    bulk_copy_g2s(k_tiles + dst, p.kv.keys + row, kRowBytes, &tile_ready[stage]);
    bulk_copy_g2s(v_tiles + dst, p.kv.values + row, kRowBytes, &tile_ready[stage]);
  };
  const auto load_tile = [&](int tile, int stage) {
    if (tile < num_tiles && threadIdx.x < kTileKeys) load_row(stage, tile_position(tile));
  };
  const int cached_before_step = p.batch.num_cached_tokens[seq];
  const auto load_first_tiles = [&](bool cached_rows) {
    for (int t = 0; t < Stages - 1 && t < num_tiles; ++t) {
      if (threadIdx.x < kTileKeys && (tile_position(t) < cached_before_step) == cached_rows) load_row(t, tile_position(t));
    }
  };
  load_first_tiles(true);
  if (p.batch_from_host) wait_for_prior_grids();
  allow_dependent_grids();
  load_first_tiles(false);

  // The group's query rows; the rows past the group are zeros, which score 0 and are never written.
  for (int i = threadIdx.x; i < kRows * L::kChunksPerRow; i += blockDim.x) {
    const int r = i / L::kChunksPerRow;
    const int c = i % L::kChunksPerRow;
    const bool valid = r < group;
    const __nv_bfloat16* src =
        valid ? p.query + (static_cast<int64_t>(token) * s.num_heads + kv_head * group + r) * HeadDim + c * 8 : p.query;
    cp_async_16(q_smem + r * L::kRowStride + c * 8, src, valid ? 16 : 0);
  }
  cp_async_commit();
  cp_async_wait<0>();  // the queries
  __syncthreads();

  const float score_scale = s.scale * kLog2e;
  const int mat = lane / 8;
  const int mat_row = lane % 8;
  uint32_t q_frag[HeadDim / 16][4];
  float o_acc[HeadDim / 8][4];
#pragma unroll
  for (int i = 0; i < HeadDim / 8; ++i) o_acc[i][0] = o_acc[i][1] = o_acc[i][2] = o_acc[i][3] = 0.0f;
  float row_max[2] = {-INFINITY, -INFINITY};
  float row_sum[2] = {0.0f, 0.0f};

#pragma unroll
  for (int kk = 0; kk < HeadDim / 16; ++kk) {
    ldmatrix_x4(q_frag[kk], q_smem + (lane % 16) * L::kRowStride + kk * 16 + (lane / 16) * 8);
  }

  for (int tile = 0; tile < num_tiles; ++tile) {
    // Every warp is done with tile - 1, whose stage the next load refills.
    if (tile > 0) __syncthreads();
    load_tile(tile + Stages - 1, (tile + Stages - 1) % Stages);
    const int stage = tile % Stages;
    mbarrier_wait_parity(&tile_ready[stage], (tile / Stages) & 1);
    const __nv_bfloat16* k_tile = k_tiles + stage * L::kTileElems + warp * kWarpKeys * L::kRowStride;
    const __nv_bfloat16* v_tile = v_tiles + stage * L::kTileElems + warp * kWarpKeys * L::kRowStride;

    float s_acc[2][4] = {};
#pragma unroll
    for (int kk = 0; kk < HeadDim / 16; ++kk) {
      uint32_t b[4];
      ldmatrix_x4(b, k_tile + ((mat / 2) * 8 + mat_row) * L::kRowStride + kk * 16 + (mat % 2) * 8);
      mma_bf16_16816(s_acc[0], q_frag[kk], b[0], b[1]);
      mma_bf16_16816(s_acc[1], q_frag[kk], b[2], b[3]);
    }

    const int first_key = kv_begin + tile * kTileKeys + warp * kWarpKeys;
    const bool needs_mask = first_key + kWarpKeys > kv_end;
#pragma unroll
    for (int n = 0; n < 2; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float v = s_acc[n][e] * score_scale;
        s_acc[n][e] = needs_mask && first_key + n * 8 + 2 * quad_col + (e & 1) >= kv_end ? -INFINITY : v;
      }
    }

    float correction[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float mx = fmaxf(row_max[h], fmaxf(fmaxf(s_acc[0][2 * h], s_acc[0][2 * h + 1]),
                                         fmaxf(s_acc[1][2 * h], s_acc[1][2 * h + 1])));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float safe = mx == -INFINITY ? 0.0f : mx;
      correction[h] = fast_exp2(row_max[h] - safe);
      row_max[h] = mx;
      float sum = 0.0f;
#pragma unroll
      for (int n = 0; n < 2; ++n) {
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

    const uint32_t a[4] = {pack_bf16x2(s_acc[0][0], s_acc[0][1]), pack_bf16x2(s_acc[0][2], s_acc[0][3]),
                           pack_bf16x2(s_acc[1][0], s_acc[1][1]), pack_bf16x2(s_acc[1][2], s_acc[1][3])};
#pragma unroll
    for (int dn = 0; dn < HeadDim / 16; ++dn) {
      uint32_t b[4];
      ldmatrix_x4_trans(b, v_tile + ((mat % 2) * 8 + mat_row) * L::kRowStride + dn * 16 + (mat / 2) * 8);
      mma_bf16_16816(o_acc[2 * dn], a, b[0], b[1]);
      mma_bf16_16816(o_acc[2 * dn + 1], a, b[2], b[3]);
    }
  }
  __syncthreads();  // every warp is done with the tiles (all landed: each was waited for): the space holds the merge

#pragma unroll
  for (int h = 0; h < 2; ++h) {
    row_sum[h] += __shfl_xor_sync(0xffffffffu, row_sum[h], 1);
    row_sum[h] += __shfl_xor_sync(0xffffffffu, row_sum[h], 2);
    const int r = quad_row + 8 * h;
    float* o_row = merge_o + (warp * kRows + r) * HeadDim;
#pragma unroll
    for (int i = 0; i < HeadDim / 8; ++i) {
      *reinterpret_cast<float2*>(o_row + i * 8 + 2 * quad_col) = make_float2(o_acc[i][2 * h], o_acc[i][2 * h + 1]);
    }
    if (quad_col == 0) {
      merge_max[warp * kRows + r] = row_max[h];
      merge_sum[warp * kRows + r] = row_sum[h];
    }
  }
  __syncthreads();

  for (int i = threadIdx.x; i < group * HeadDim; i += blockDim.x) {
    const int r = i / HeadDim;
    const int d = i % HeadDim;
    float m = -INFINITY;
#pragma unroll
    for (int w = 0; w < Warps; ++w) m = fmaxf(m, merge_max[w * kRows + r]);
    const float shift = m == -INFINITY ? 0.0f : m;
    float sum = 0.0f, acc = 0.0f;
#pragma unroll
    for (int w = 0; w < Warps; ++w) {
      const float weight = exp2f(merge_max[w * kRows + r] - shift);
      sum += weight * merge_sum[w * kRows + r];
      acc += weight * merge_o[(w * kRows + r) * HeadDim + d];
    }
    const int head = kv_head * group + r;
    const float value = sum > 0.0f ? acc / sum : 0.0f;
    if (p.shares_are_outputs()) {
      p.out[(static_cast<int64_t>(token) * s.num_heads + head) * HeadDim + d] = __float2bfloat16(value);
      continue;
    }
    p.partial_out[(static_cast<int64_t>(item) * s.num_heads + head) * HeadDim + d] = value;
    if (d == 0) p.partial_lse[item * s.num_heads + head] = sum > 0.0f ? m + log2f(sum) : -INFINITY;
  }
}

// The per-share kernel alone (the benchmark times other stage counts through it).
template <int HeadDim, int Warps, int Stages>
void launch_chunk_kernel(const DecodeAttentionParams& params, cudaStream_t stream) {
  constexpr size_t smem = Layout<HeadDim, Warps, Stages>::kSharedBytes;
  auto kernel = chunk_kernel<HeadDim, Warps, Stages>;
  // The whole shared-memory carveout, so that as many blocks as possible fit on an SM.
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (err == cudaSuccess) {
    err = cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared);
  }
  if (err != cudaSuccess) throw std::runtime_error(std::string("decode attention: ") + cudaGetErrorString(err));
  const dim3 grid(params.num_items, params.shape.num_kv_heads);
  launch_dependent("decode attention", kernel, grid, Warps * 32, smem, stream, params);
}

}  // namespace decode_mma

template <int HeadDim>
void launch_decode_attention_mma(const DecodeAttentionParams& params, cudaStream_t stream) {
  decode_mma::launch_chunk_kernel<HeadDim, decode_mma::kDefaultWarps, decode_mma::kDefaultStages>(params, stream);
}

}  // namespace tern::kernels
