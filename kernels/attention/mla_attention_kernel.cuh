#pragma once
// One block of 8 warps per 64 query rows ((token, head) pairs) and a range of keys, in the layout of
// attention/shared_kv_tile.cuh (warps split keys for S and value dims for O). Keys stream through two shared-memory
// stages (cp.async, gathered through the block table); the value tile is the key tile's first value_dim columns.
// Dims that are not multiples of 16 are zero-padded in shared memory. An FP8 cache's codes are loaded through
// registers and stored as bf16 times the key scale (the values are the keys' first dims, so the same scale): the
// stages hold bf16 either way, and a 576-dim key's two stages leave no shared memory for staging codes.
#include <cmath>
#include <stdexcept>
#include <string>

#include "attention/key_shares.h"
#include "attention/mla_attention.h"
#include "attention/shared_kv_tile.cuh"
#include "common/device_math.cuh"

namespace tern::kernels {

namespace mla {

using shared_kv::kKeys;
using shared_kv::kNumWarps;
using shared_kv::kPStride;
using shared_kv::kRows;
using shared_kv::padded_dim;
using shared_kv::row_stride;

constexpr size_t shared_bytes(int key_dim) {
  return static_cast<size_t>((kRows + 2 * kKeys) * row_stride(key_dim) + kRows * kPStride) * sizeof(__nv_bfloat16);
}

template <int MaxValueDim, bool Split, bool Fp8>
__global__ void __launch_bounds__(shared_kv::kThreads, 1) tile_kernel(const MlaAttentionParams p) {
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

  const shared_kv::Place place;
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
      if constexpr (Fp8) {
        const uint2 codes = in_row ? *reinterpret_cast<const uint2*>(p.kv.key_codes + row + c * 8) : make_uint2(0, 0);
        store_dequantized8(codes, p.kv.key_scale, dst + c * 8);
      } else {
        cp_async_16(dst + c * 8, p.kv.keys + row + (in_row ? c * 8 : 0), in_row ? 16 : 0);
      }
    }
  };
  if (num_tiles > 0) load_tile(0, 0);
  cp_async_commit();

  const int qpos[2] = {row_pos[place.row(0)], row_pos[place.row(1)]};
  const float score_scale = p.scale * shared_kv::kLog2e;
  shared_kv::Rows<kChunksPerWarp> rows(place, p.value_dim);

  for (int tile = 0; tile < num_tiles; ++tile) {
    cp_async_wait<0>();
    __syncthreads();
    if (tile + 1 < num_tiles) load_tile(tile + 1, (tile + 1) & 1);
    cp_async_commit();
    const int first_key = kv_begin + tile * kKeys;
    const auto valid = [&](int key, int h) { return first_key + key < kv_end && first_key + key <= qpos[h]; };
    shared_kv::attend_tile(place, q_smem, k_smem + (tile & 1) * kKeys * stride, p_smem, stride, dim16, score_scale,
                           half_max, valid, rows);
  }
  cp_async_wait<0>();

  const auto out_row = [&](int r) {
    return Split ? static_cast<int64_t>(blockIdx.x) * num_heads + row_head[r]
                 : static_cast<int64_t>(row_token[r]) * num_heads + row_head[r];
  };
  shared_kv::finish_rows(
      place, rows, half_sum, num_rows, p.value_dim,
      [&](int r, int column, float lo, float hi) {
        if (Split) {
          *reinterpret_cast<float2*>(p.partial_out + out_row(r) * p.value_dim + column) = make_float2(lo, hi);
        } else {
          *reinterpret_cast<__nv_bfloat162*>(p.out + out_row(r) * p.value_dim + column) =
              __floats2bfloat162_rn(lo, hi);
        }
      },
      [&](int r, float lse) {
        if (Split) p.partial_lse[out_row(r)] = lse;
      });
}

template <int MaxValueDim, bool Split, bool Fp8>
void launch_tiles(const MlaAttentionParams& params, cudaStream_t stream) {
  auto kernel = tile_kernel<MaxValueDim, Split, Fp8>;
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
  const bool fp8 = params.kv.fp8();
  if (split) {
    fp8 ? mla::launch_tiles<MaxValueDim, true, true>(params, stream)
        : mla::launch_tiles<MaxValueDim, true, false>(params, stream);
  } else {
    fp8 ? mla::launch_tiles<MaxValueDim, false, true>(params, stream)
        : mla::launch_tiles<MaxValueDim, false, false>(params, stream);
  }
}

}  // namespace tern::kernels
