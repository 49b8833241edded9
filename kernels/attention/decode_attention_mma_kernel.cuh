#pragma once
// The tensor-core split-KV kernels for head_dim 64 and 128: chunk_kernel, one block of `Warps` warps per (work item,
// KV head), and all_heads_kernel, one block per work item for every KV head (below). In chunk_kernel the GQA
// group's query heads, padded with zeros to 16 rows, are the A operand of mma.m16n8k16; keys and values stream
// through shared memory in tiles of 16 keys per warp, Stages deep, and warp w takes keys [16w, 16w + 16) of every
// tile: S = Q K^T, the online softmax and O += P V stay in registers. At the end the warps' partial
// results are merged by their log-sum-exp through shared memory. Each K/V byte crosses device memory once per
// group and shared memory once per block, so the arithmetic stays far below the memory time (the CUDA-core kernel
// re-read every tile once per warp and was bound by FMAs and shared-memory traffic). The tiles come in by the copy
// engine (tensor-map or bulk copies, below), completing on a per-stage mbarrier (with 16-byte cp.async the same
// kernel streamed about 20 GB/s per SM on the H200 at best, against 32 for the copy bandwidth).
// An FP8 cache (PagedKv::fp8) comes in pages of e4m3 codes, half the bytes, and the products run on float16
// mma.m16n8k16: every e4m3 code is a float16 value, so a code pair becomes an operand register in one conversion
// (cvt.f16x2.e4m3x2), read straight from the page without ldmatrix (attend_fp8_keys). The queries become float16
// (clamped to its range) and the probabilities float16, which holds them more finely than bf16; key_scale joins the
// score scale and value_scale multiplies the output.
#include <climits>
#include <cmath>
#include <stdexcept>
#include <string>

#include "attention/decode_attention.h"
#include "attention/key_shares.h"
#include "attention/online_softmax.cuh"
#include "attention/smem_swizzle.h"
#include "common/dependent_launch.cuh"
#include "common/device_math.cuh"
#include "common/tensor_map.h"

namespace tern::kernels {

namespace decode_mma {

constexpr int kRows = 16;  // query heads of the group, zero-padded: the mma's M
constexpr int kWarpKeys = kDecodePageKeys;  // a page copy brings one warp's keys of a tile
// 4 warps and 2 stages (64-key tiles) fit three blocks per SM for head_dim 128, which the row copies below need
// (the plan fills two an SM, decode_attention.h).
// With page copies, deeper pipelines at fewer blocks per SM were slower on the H200 (1 block of 4-6 stages, or of
// 8 warps: 64-76% of the copy bandwidth at batch 1 and 32K keys, 67-86% at batch 8, against 74% and 92%), and 2
// or 3 blocks per SM about the same (docs/BENCHMARKS.md).
constexpr int kDefaultWarps = 4;
constexpr int kDefaultStages = 2;
// The whole-context plan (kDecodeWholeContextKeys): a block an SM, three 128-key tiles in flight. (12 warps of two
// 192-key tiles, so that a warp attends two pages rather than three, decoded batch 1 at 4.062 ms a token against
// 4.021: docs/BENCHMARKS.md.)
constexpr int kWholeContextWarps = 8;
constexpr int kWholeContextStages = 3;
constexpr float kLog2e = 1.4426950408889634f;

// chunk_kernel's tiles come in one of two ways. Where the cache's blocks hold whole pages of kWarpKeys keys
// (block_size a multiple of 16), a tensor-map copy (TMA) brings a page of one KV head's keys or values (4 KB for
// head_dim 128) into smem_swizzle.h's 128-byte swizzled layout. Otherwise a bulk copy brings each key's row of the
// head (256 bytes for head_dim 128), padded by 16 bytes in shared memory so that ldmatrix rows hit distinct banks;
// a block issues those at about 8.5 GB/s on the H200 whatever its pipeline depth. Pages against rows, same call
// (docs/BENCHMARKS.md): batch 1 at 32K keys 73% of the copy bandwidth against 64%, batch 8 92% against 89%,
// head_dim 64 at batch 1 62% against 42%.
template <int HeadDim, int Warps, int Stages, bool Pages, bool Fp8 = false>
struct Layout {
  static_assert(Pages || !Fp8, "FP8 caches come in pages");
  static constexpr int kElementBytes = Fp8 ? 1 : 2;
  static constexpr int kTileKeys = kWarpKeys * Warps;
  static constexpr int kKeyRowStride = Pages ? HeadDim : HeadDim + 8;
  static constexpr int kTileElems = kTileKeys * kKeyRowStride;
  static constexpr int kLoaders = Pages ? Warps * 2 : kTileKeys;  // threads issuing a tile's copies
  static constexpr uint32_t kPageBytes = kWarpKeys * HeadDim * kElementBytes;
  static constexpr size_t kPipelineBytes = 2 * Stages * kTileElems * kElementBytes;
  // After the loop the pipeline's space holds each warp's O rows, row maxima and row sums for the merge.
  static constexpr size_t kMergeBytes = Warps * kRows * (HeadDim + 2) * sizeof(float);
  static constexpr size_t kTilesBytes = kPipelineBytes > kMergeBytes ? kPipelineBytes : kMergeBytes;
  // Swizzled pages start 1024-byte aligned; the dynamic shared memory base is only promised 16 bytes.
  static constexpr size_t kAlignSlack = Pages ? swizzle128::kAtomBytes : 0;
  static constexpr size_t kSharedBytes = kAlignSlack + kTilesBytes;
};

// Where a warp's 16 keys of a tile lie in shared memory, as 16-byte chunks (8 columns) of rows. PaddedRows: row r
// at r * row_stride elements. SwizzledPage: a page as its tensor-map copies land it.
struct PaddedRows {
  const __nv_bfloat16* first;
  int row_stride;
  __device__ __forceinline__ const __nv_bfloat16* chunk(int row, int c) const { return first + row * row_stride + c * 8; }
};
struct SwizzledPage {
  const __nv_bfloat16* first;
  __device__ __forceinline__ const __nv_bfloat16* chunk(int row, int c) const {
    return first + swizzle128::chunk_offset(kWarpKeys, row, c) / sizeof(__nv_bfloat16);
  }
};

// A page of FP8 codes as its tensor-map copy lands it: 16 rows of HeadDim codes, the 16-byte chunks of row r at
// chunk c ^ (r % 8) for 128-byte rows and c ^ (r / 2 % 4) for 64-byte rows (byte_tensor_map_2d_swizzled). The
// swizzle also keeps a warp's reads of eight rows at one column on distinct banks.
template <int HeadDim>
struct Fp8Page {
  const uint8_t* first;
  __device__ __forceinline__ const uint8_t* at(int row, int column) const {
    const int swizzle = HeadDim == 128 ? row % 8 : row / 2 % 4;
    return first + row * HeadDim + ((column / 16) ^ swizzle) * 16 + column % 16;
  }
};

// The tensor maps of a layer's keys and values for chunk_kernel's page copies (kv_page_maps).
struct KvPageMaps {
  CUtensorMap keys;
  CUtensorMap values;
};

// The cache slot of key `pos` of the sequence whose block table is `table`.
__device__ __forceinline__ int64_t key_slot(const DecodeAttentionParams& p, const int32_t* table, int pos) {
  return static_cast<int64_t>(table[pos / p.kv.block_size]) * p.kv.block_size + pos % p.kv.block_size;
}

// The first key of a token's window.
__device__ __forceinline__ int window_begin(const DecodeAttentionParams& p, int position) {
  return p.shape.sliding_window > 0 ? max(0, position - p.shape.sliding_window + 1) : 0;
}

// A warp's running attention over its keys: the group's 16 (padded) query rows as mma A fragments, the output
// accumulators and each row's running max and sum (this thread's two rows, quad_row and quad_row + 8).
template <int HeadDim>
struct WarpState {
  uint32_t q_frag[HeadDim / 16][4];
  float o_acc[HeadDim / 8][4] = {};
  float row_max[2] = {-INFINITY, -INFINITY};
  float row_sum[2] = {0.0f, 0.0f};
};

// The query rows of `kv_head`'s group as mma A fragments, straight from global memory (rows past the group are
// zeros).
// For an FP8 cache the fragments are float16 and their K order is permuted, as attend_fp8_keys reads the keys: the
// k16 step's logical columns 2c, 2c + 1 (c = lane % 4) hold dims 4c, 4c + 1 and columns 2c + 8, 2c + 9 dims
// 4c + 2, 4c + 3, so that a lane's key operand is four adjacent codes. A dot product does not depend on the order
// of its terms.
template <int HeadDim, bool Fp8 = false>
__device__ __forceinline__ void start_warp(WarpState<HeadDim>& w, const DecodeAttentionParams& p, int token,
                                           int kv_head) {
  const int lane = threadIdx.x % 32;
  const int group = p.shape.num_heads / p.shape.num_kv_heads;
  const __nv_bfloat16* q = p.query + (static_cast<int64_t>(token) * p.shape.num_heads + kv_head * group) * HeadDim;
  const int lo_row = lane / 4;
#pragma unroll
  for (int kk = 0; kk < HeadDim / 16; ++kk) {
#pragma unroll
    for (int f = 0; f < 4; ++f) {
      const int row = lo_row + (f % 2) * 8;
      const int c = Fp8 ? kk * 16 + 4 * (lane % 4) + (f / 2) * 2 : kk * 16 + 2 * (lane % 4) + (f / 2) * 8;
      if (row >= group) {
        w.q_frag[kk][f] = 0u;
      } else if constexpr (Fp8) {
        const __nv_bfloat162 pair = *reinterpret_cast<const __nv_bfloat162*>(q + row * HeadDim + c);
        w.q_frag[kk][f] = pack_f16x2_saturated(__low2float(pair), __high2float(pair));
      } else {
        w.q_frag[kk][f] = *reinterpret_cast<const uint32_t*>(q + row * HeadDim + c);
      }
    }
  }
}

// The scores of the warp's 16 keys (the first at `first_key`) to probabilities: masked outside [begin, end), the
// online softmax's running maxima and sums updated, the output rescaled.
template <int HeadDim>
__device__ __forceinline__ void softmax_keys(WarpState<HeadDim>& w, float (&s_acc)[2][4], int first_key, int begin,
                                             int end, float score_scale) {
  const int quad_col = threadIdx.x % 4;
  const bool needs_mask = first_key < begin || first_key + kWarpKeys > end;
#pragma unroll
  for (int n = 0; n < 2; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float v = s_acc[n][e] * score_scale;
      const int key = first_key + n * 8 + 2 * quad_col + (e & 1);
      s_acc[n][e] = needs_mask && (key < begin || key >= end) ? -INFINITY : v;
    }
  }

  float correction[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float mx = fmaxf(w.row_max[h], fmaxf(fmaxf(s_acc[0][2 * h], s_acc[0][2 * h + 1]),
                                         fmaxf(s_acc[1][2 * h], s_acc[1][2 * h + 1])));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    correction[h] = online_softmax_row(s_acc, h, mx, w.row_max[h], w.row_sum[h]);
  }
#pragma unroll
  for (int i = 0; i < HeadDim / 8; ++i) {
    w.o_acc[i][0] *= correction[0];
    w.o_acc[i][1] *= correction[0];
    w.o_acc[i][2] *= correction[1];
    w.o_acc[i][3] *= correction[1];
  }
}

// The warp's 16 keys of a tile (k_rows, v_rows: PaddedRows or SwizzledPage), the first of them at `first_key`:
// S = Q K^T, the online softmax, O += P V. Keys before `begin` or at or past `end` weigh 0.
template <int HeadDim, typename Rows>
__device__ __forceinline__ void attend_keys(WarpState<HeadDim>& w, Rows k_rows, Rows v_rows, int first_key, int begin,
                                            int end, float score_scale) {
  const int lane = threadIdx.x % 32;
  const int mat = lane / 8;
  const int mat_row = lane % 8;
  float s_acc[2][4] = {};
#pragma unroll
  for (int kk = 0; kk < HeadDim / 16; ++kk) {
    uint32_t b[4];
    ldmatrix_x4(b, k_rows.chunk((mat / 2) * 8 + mat_row, kk * 2 + mat % 2));
    mma_bf16_16816(s_acc[0], w.q_frag[kk], b[0], b[1]);
    mma_bf16_16816(s_acc[1], w.q_frag[kk], b[2], b[3]);
  }
  softmax_keys<HeadDim>(w, s_acc, first_key, begin, end, score_scale);

  const uint32_t a[4] = {pack_bf16x2(s_acc[0][0], s_acc[0][1]), pack_bf16x2(s_acc[0][2], s_acc[0][3]),
                         pack_bf16x2(s_acc[1][0], s_acc[1][1]), pack_bf16x2(s_acc[1][2], s_acc[1][3])};
#pragma unroll
  for (int dn = 0; dn < HeadDim / 16; ++dn) {
    uint32_t b[4];
    ldmatrix_x4_trans(b, v_rows.chunk((mat % 2) * 8 + mat_row, dn * 2 + mat / 2));
    mma_bf16_16816(w.o_acc[2 * dn], a, b[0], b[1]);
    mma_bf16_16816(w.o_acc[2 * dn + 1], a, b[2], b[3]);
  }
}

// attend_keys over FP8 pages (start_warp<HeadDim, true>'s float16 query fragments). The mma B operand of S = Q K^T
// is key n = lane / 4's codes at dims 4c .. 4c + 3 (one 32-bit read); that of O = P V pairs keys 2c, 2c + 1 (and
// 2c + 8, 2c + 9) at dim n, bytes of two rows.
template <int HeadDim>
__device__ __forceinline__ void attend_fp8_keys(WarpState<HeadDim>& w, Fp8Page<HeadDim> k_page,
                                                Fp8Page<HeadDim> v_page, int first_key, int begin, int end,
                                                float score_scale) {
  const int lane = threadIdx.x % 32;
  const int n = lane / 4;
  const int c = lane % 4;
  float s_acc[2][4] = {};
#pragma unroll
  for (int kk = 0; kk < HeadDim / 16; ++kk) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const uint32_t codes = *reinterpret_cast<const uint32_t*>(k_page.at(8 * half + n, kk * 16 + 4 * c));
      mma_f16_16816(s_acc[half], w.q_frag[kk], e4m3x2_to_f16x2(static_cast<uint16_t>(codes)),
                    e4m3x2_to_f16x2(static_cast<uint16_t>(codes >> 16)));
    }
  }
  softmax_keys<HeadDim>(w, s_acc, first_key, begin, end, score_scale);

  const uint32_t a[4] = {pack_f16x2_saturated(s_acc[0][0], s_acc[0][1]),
                         pack_f16x2_saturated(s_acc[0][2], s_acc[0][3]),
                         pack_f16x2_saturated(s_acc[1][0], s_acc[1][1]),
                         pack_f16x2_saturated(s_acc[1][2], s_acc[1][3])};
  const auto code_pair = [&](int key, int dim) {
    return static_cast<uint16_t>(*v_page.at(key, dim) | (*v_page.at(key + 1, dim) << 8));
  };
#pragma unroll
  for (int dn = 0; dn < HeadDim / 8; ++dn) {
    const int dim = dn * 8 + n;
    mma_f16_16816(w.o_acc[dn], a, e4m3x2_to_f16x2(code_pair(2 * c, dim)), e4m3x2_to_f16x2(code_pair(2 * c + 8, dim)));
  }
}

// The block's warps merge their results by log-sum-exp through `merge_space` (the pipeline's shared memory, every
// tile consumed) and write the share: the bf16 output when it is the only share, else its float32 partial output
// and log-sum-exp.
template <int HeadDim, int Warps>
__device__ __forceinline__ void merge_warps_and_write(const DecodeAttentionParams& p, WarpState<HeadDim>& w,
                                                      float* merge_space, int item, int token, int kv_head) {
  float* merge_o = merge_space;  // [warp][row][HeadDim]
  float* merge_max = merge_o + Warps * kRows * HeadDim;
  float* merge_sum = merge_max + Warps * kRows;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int quad_row = lane / 4;
  const int quad_col = lane % 4;
  const AttentionShape& s = p.shape;
  const int group = s.num_heads / s.num_kv_heads;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    w.row_sum[h] += __shfl_xor_sync(0xffffffffu, w.row_sum[h], 1);
    w.row_sum[h] += __shfl_xor_sync(0xffffffffu, w.row_sum[h], 2);
    const int r = quad_row + 8 * h;
    if (r >= group) continue;  // a padding row
    float* o_row = merge_o + (warp * kRows + r) * HeadDim;
#pragma unroll
    for (int i = 0; i < HeadDim / 8; ++i) {
      *reinterpret_cast<float2*>(o_row + i * 8 + 2 * quad_col) = make_float2(w.o_acc[i][2 * h], w.o_acc[i][2 * h + 1]);
    }
    if (quad_col == 0) {
      merge_max[warp * kRows + r] = w.row_max[h];
      merge_sum[warp * kRows + r] = w.row_sum[h];
    }
  }
  __syncthreads();

  for (int i = threadIdx.x; i < group * HeadDim; i += blockDim.x) {
    const int r = i / HeadDim;
    const int d = i % HeadDim;
    float m = -INFINITY;
#pragma unroll
    for (int v = 0; v < Warps; ++v) m = fmaxf(m, merge_max[v * kRows + r]);
    const float shift = m == -INFINITY ? 0.0f : m;
    float sum = 0.0f, acc = 0.0f;
#pragma unroll
    for (int v = 0; v < Warps; ++v) {
      const float weight = exp2f(merge_max[v * kRows + r] - shift);
      sum += weight * merge_sum[v * kRows + r];
      acc += weight * merge_o[(v * kRows + r) * HeadDim + d];
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

// A page's value rows outside keys [begin, end) as zeros: a page copy brings whole pages, and rows of other
// tokens or not yet written may hold anything, which P V would multiply by 0 (NaN times 0 is NaN). Each lane clears
// one 64-column half row: a whole 128-byte row of the swizzled layout (smem_swizzle.h), wherever the swizzle put
// its chunks, so the row's place is all it needs of SwizzledPage. It then fences its writes against the next copy
// into the stage.
// An FP8 page's rows are HeadDim bytes, contiguous: lanes 0-15 clear one each (zero bytes are e4m3 zeros).
template <int HeadDim, bool Fp8>
__device__ __forceinline__ void clear_rows_outside(unsigned char* v_page, int first_key, int begin, int end) {
  const int lane = threadIdx.x % 32;
  const int row = lane % kWarpKeys;
  const int half = lane / kWarpKeys;
  const int key = first_key + row;
  constexpr int kRowChunks = Fp8 ? HeadDim / 16 : 8;  // 16-byte chunks a lane clears
  const bool clears = Fp8 ? half == 0 : half < HeadDim / 64;
  if (clears && (key < begin || key >= end)) {
    uint4* dst = reinterpret_cast<uint4*>(v_page + (Fp8 ? row * HeadDim : (half * kWarpKeys + row) * 128));
#pragma unroll
    for (int c = 0; c < kRowChunks; ++c) dst[c] = make_uint4(0, 0, 0, 0);
    fence_proxy_async_shared();
  }
  __syncwarp();
}

template <int HeadDim, int Warps, int Stages, bool Pages, bool Fp8>
__global__ void __launch_bounds__(Warps * 32)
    chunk_kernel(const DecodeAttentionParams p, const __grid_constant__ KvPageMaps maps) {
  using L = Layout<HeadDim, Warps, Stages, Pages, Fp8>;
  constexpr int kTileKeys = L::kTileKeys;
  constexpr uint32_t kTileBytes = L::kTileElems * L::kElementBytes;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  unsigned char* smem = smem_raw;
  if constexpr (Pages) {
    smem += (swizzle128::kAtomBytes - smem_address(smem_raw) % swizzle128::kAtomBytes) % swizzle128::kAtomBytes;
  }
  unsigned char* k_tiles = smem;  // [Stages][kTileBytes]
  unsigned char* v_tiles = k_tiles + Stages * kTileBytes;

  __shared__ uint64_t tile_ready[Stages];  // one mbarrier per stage: its keys and values have landed

  // Before the wait (dependent_launch.cuh): the split plan and the batch when it is step metadata, and the first
  // tiles' rows that earlier steps cached; after it, the queries and this step's rows, which the kernels before
  // write.
  if (!p.batch_from_host) wait_for_prior_grids();
  const int item = blockIdx.x;
  const int kv_head = blockIdx.y;
  const int warp = threadIdx.x / 32;

  const int token = p.item_token[item];
  const int seq = p.batch.token_seq[token];
  const int position = p.batch.positions[token];
  const int window_first = window_begin(p, position);
  // Page copies start at a page: keys before the window weigh 0.
  const int keys_first = Pages ? window_first - window_first % kWarpKeys : window_first;
  const KeyShare keys = key_share<kTileKeys>(keys_first, position + 1, p.item_chunk[item], p.num_splits);

  if (threadIdx.x == 0) {
    for (int stage = 0; stage < Stages; ++stage) mbarrier_init(&tile_ready[stage], L::kLoaders);
    mbarrier_init_fence();
  }
  __syncthreads();

  // Thread t < kLoaders issues its copies of every tile, each arriving on the stage's barrier once. Row copies:
  // thread r brings key row r, its key and value (rows past the share repeat the share's last key, whose scores
  // are masked to weight 0, so that P V never multiplies garbage). Page copies: thread t brings page t / 2 of the
  // tile (warp t / 2's keys), its keys (t even) or values.
  const int32_t* table = p.kv.block_tables + p.kv.block_table_offsets[seq];
  const int cached_before_step = p.batch.num_cached_tokens[seq];
  constexpr uint32_t kRowBytes = HeadDim * sizeof(__nv_bfloat16);
  const int loader_offset =
      Pages ? static_cast<int>(threadIdx.x) / 2 * kWarpKeys : static_cast<int>(threadIdx.x);
  const auto first_position = [&](int tile) { return keys.begin + tile * kTileKeys + loader_offset; };
  // Whether the thread's copies of `tile` read only rows that earlier steps cached (or read nothing).
  const auto cached_copies = [&](int tile) {
    const int pos = first_position(tile);
    return Pages ? pos >= keys.end || pos + kWarpKeys <= cached_before_step
                 : min(pos, keys.end - 1) < cached_before_step;
  };
  const auto load = [&](int tile, int stage) {
    const int pos = first_position(tile);
    if constexpr (Pages) {
      if (pos >= keys.end) {
        mbarrier_arrive(&tile_ready[stage]);
        return;
      }
      const bool values = threadIdx.x % 2;
      unsigned char* dst = (values ? v_tiles : k_tiles) + stage * kTileBytes + (threadIdx.x / 2) * L::kPageBytes;
      const CUtensorMap* map = values ? &maps.values : &maps.keys;
      const int slot = static_cast<int>(key_slot(p, table, pos));
      mbarrier_arrive_expect_tx(&tile_ready[stage], L::kPageBytes);
      if constexpr (Fp8) {
        tensor_copy_2d_g2s(dst, map, kv_head * HeadDim, slot, &tile_ready[stage]);
      } else {
        tensor_copy_3d_g2s(dst, map, 0, slot, kv_head * (HeadDim / 64), &tile_ready[stage]);
      }
    } else {
      const int64_t row = (key_slot(p, table, min(pos, keys.end - 1)) * p.shape.num_kv_heads + kv_head) * HeadDim;
      const int dst = (stage * L::kTileElems + threadIdx.x * L::kKeyRowStride) * L::kElementBytes;
      mbarrier_arrive_expect_tx(&tile_ready[stage], 2 * kRowBytes);
      bulk_copy_g2s(k_tiles + dst, p.kv.keys + row, kRowBytes, &tile_ready[stage]);
      bulk_copy_g2s(v_tiles + dst, p.kv.values + row, kRowBytes, &tile_ready[stage]);
    }
  };
  const bool loader = threadIdx.x < L::kLoaders;
  // A tile for every stage, those of cached rows before the wait: with a stage held back for the loop's first
  // refill, the whole-context kernel's third tile (keys 256-383) came after the wait, about 1 us a layer later.
  const auto load_first_tiles = [&](bool cached) {
    for (int t = 0; t < Stages && t < keys.num_tiles; ++t) {
      if (loader && cached_copies(t) == cached) load(t, t);
    }
  };
  load_first_tiles(true);
  if (p.batch_from_host) wait_for_prior_grids();
  allow_dependent_grids();
  load_first_tiles(false);

  WarpState<HeadDim> state;
  start_warp<HeadDim, Fp8>(state, p, token, kv_head);
  const float score_scale = p.shape.scale * kLog2e * (Fp8 ? p.kv.key_scale : 1.0f);
  for (int tile = 0; tile < keys.num_tiles; ++tile) {
    if (tile > 0) {
      __syncthreads();  // every warp is done with tile - 1, whose stage takes tile - 1 + Stages
      const int next = tile - 1 + Stages;
      if (loader && next < keys.num_tiles) load(next, next % Stages);
    }
    const int stage = tile % Stages;
    const int first_key = keys.begin + tile * kTileKeys + warp * kWarpKeys;
    if (first_key >= keys.end) continue;  // past the share: nothing of this warp's to wait for
    mbarrier_wait_parity(&tile_ready[stage], (tile / Stages) & 1);
    const int offset = (stage * L::kTileElems + warp * kWarpKeys * L::kKeyRowStride) * L::kElementBytes;
    const auto bf16_at = [&](unsigned char* tiles) { return reinterpret_cast<const __nv_bfloat16*>(tiles + offset); };
    if constexpr (Pages) {
      if (first_key < window_first || first_key + kWarpKeys > keys.end) {
        clear_rows_outside<HeadDim, Fp8>(v_tiles + offset, first_key, window_first, keys.end);
      }
      if constexpr (Fp8) {
        attend_fp8_keys<HeadDim>(state, Fp8Page<HeadDim>{k_tiles + offset}, Fp8Page<HeadDim>{v_tiles + offset},
                                 first_key, window_first, keys.end, score_scale);
      } else {
        attend_keys<HeadDim>(state, SwizzledPage{bf16_at(k_tiles)}, SwizzledPage{bf16_at(v_tiles)}, first_key,
                             window_first, keys.end, score_scale);
      }
    } else {
      attend_keys<HeadDim>(state, PaddedRows{bf16_at(k_tiles), L::kKeyRowStride},
                           PaddedRows{bf16_at(v_tiles), L::kKeyRowStride}, first_key, keys.begin, keys.end,
                           score_scale);
    }
  }
  if constexpr (Fp8) {
#pragma unroll
    for (int i = 0; i < HeadDim / 8; ++i) {
#pragma unroll
      for (int e = 0; e < 4; ++e) state.o_acc[i][e] *= p.kv.value_scale;
    }
  }
  __syncthreads();  // every warp is done with the tiles (all landed: each was waited for): the space holds the merge
  merge_warps_and_write<HeadDim, Warps>(p, state, reinterpret_cast<float*>(k_tiles), item, token, kv_head);
}

// A warp that attended all of its share's keys for one KV head writes the share, as merge_warps_and_write does for
// a block.
template <int HeadDim>
__device__ __forceinline__ void write_warp_share(const DecodeAttentionParams& p, WarpState<HeadDim>& w, int item,
                                                 int token, int kv_head) {
  const AttentionShape& s = p.shape;
  const int group = s.num_heads / s.num_kv_heads;
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    w.row_sum[h] += __shfl_xor_sync(0xffffffffu, w.row_sum[h], 1);
    w.row_sum[h] += __shfl_xor_sync(0xffffffffu, w.row_sum[h], 2);
    const int r = lane / 4 + 8 * h;
    if (r >= group) continue;
    const int head = kv_head * group + r;
    const float sum = w.row_sum[h];
    const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
#pragma unroll
    for (int i = 0; i < HeadDim / 8; ++i) {
      const int d = i * 8 + 2 * (lane % 4);
      const float2 value = make_float2(w.o_acc[i][2 * h] * inv, w.o_acc[i][2 * h + 1] * inv);
      if (p.shares_are_outputs()) {
        *reinterpret_cast<__nv_bfloat162*>(p.out + (static_cast<int64_t>(token) * s.num_heads + head) * HeadDim + d) =
            __floats2bfloat162_rn(value.x, value.y);
      } else {
        *reinterpret_cast<float2*>(p.partial_out + (static_cast<int64_t>(item) * s.num_heads + head) * HeadDim + d) =
            value;
      }
    }
    if (!p.shares_are_outputs() && lane % 4 == 0) {
      p.partial_lse[item * s.num_heads + head] = sum > 0.0f ? w.row_max[h] + log2f(sum) : -INFINITY;
    }
  }
}

// One block per item with every KV head of its token (DecodeAttentionParams::all_heads): a key's rows of all KV
// heads lie together in the cache ([slot, kv_head, head_dim]), so one bulk copy brings them (2 KB for 8 heads of
// 128), where chunk_kernel's copies are single 256-byte rows. On the H200 a block streamed 8.5 GB/s in 256-byte bulk
// copies whatever its pipeline depth, and 31 GB/s, the SM's share of the copy bandwidth, in 2 KB ones
// (docs/BENCHMARKS.md). Warp h attends KV head h over 16-key tiles; the last warp is the producer, keeping up to
// `stages` tiles in flight (full and empty mbarriers per stage, so that no block-wide barrier stands between a
// tile's use and the next load). Each key row is padded by 16 bytes in shared memory so that the rows of a warp's
// ldmatrix fall on distinct banks.
// Share c of S takes tiles c, c + S, c + 2S, ... of its token's window. (Taking tiles from a per-token counter
// instead, so that a token's blocks would end together, was slower: docs/BENCHMARKS.md.)
constexpr int kAllHeadsMaxStages = 8;
constexpr size_t kAllHeadsSharedBytes = 200 * 1024;
// A key's row of every KV head, padded by 16 bytes.
__host__ __device__ constexpr int all_heads_row_stride(int num_kv_heads, int head_dim) {
  return num_kv_heads * head_dim + 8;
}
inline size_t all_heads_stage_bytes(int num_kv_heads, int head_dim) {
  return 2 * kWarpKeys * all_heads_row_stride(num_kv_heads, head_dim) * sizeof(__nv_bfloat16);
}
inline int all_heads_stages(int num_kv_heads, int head_dim) {
  const int fit = static_cast<int>(kAllHeadsSharedBytes / all_heads_stage_bytes(num_kv_heads, head_dim));
  return fit < kAllHeadsMaxStages ? fit : kAllHeadsMaxStages;
}

template <int HeadDim>
__global__ void __launch_bounds__((kDecodeAllHeadsMaxKvHeads + 1) * 32)
    all_heads_kernel(const DecodeAttentionParams p, int stages) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __shared__ uint64_t full[kAllHeadsMaxStages];
  __shared__ uint64_t empty[kAllHeadsMaxStages];
  const int kv_heads = p.shape.num_kv_heads;
  const int row_stride = all_heads_row_stride(kv_heads, HeadDim);
  const int tensor_elems = kWarpKeys * row_stride;  // one stage's keys (then its values)
  __nv_bfloat16* tiles = reinterpret_cast<__nv_bfloat16*>(smem_raw);  // [stage][K, V][key][row_stride]

  if (!p.batch_from_host) wait_for_prior_grids();
  const int item = blockIdx.x;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int token = p.item_token[item];
  const int seq = p.batch.token_seq[token];
  const int position = p.batch.positions[token];
  const int first_key = window_begin(p, position);
  const int share = p.item_chunk[item];
  const int shares = p.num_splits;
  const int num_tiles = (position + 1 - first_key + kWarpKeys - 1) / kWarpKeys;  // of the window
  const int share_tiles = num_tiles > share ? (num_tiles - share + shares - 1) / shares : 0;

  if (threadIdx.x == 0) {
    for (int stage = 0; stage < stages; ++stage) {
      mbarrier_init(&full[stage], 1);
      mbarrier_init(&empty[stage], kv_heads * 32);
    }
    mbarrier_init_fence();
  }
  __syncthreads();

  if (warp == kv_heads) {
    // The producer: lane l brings key l % 16 of a tile, its keys (lanes 0-15) or values (16-31). Rows past the
    // window repeat its last key (weight 0). Before the wait it brings the first tiles' rows that earlier steps
    // cached, after it the rest of them and every later tile.
    const int32_t* table = p.kv.block_tables + p.kv.block_table_offsets[seq];
    const int cached_before_step = p.batch.num_cached_tokens[seq];
    const uint32_t row_bytes = kv_heads * HeadDim * sizeof(__nv_bfloat16);
    const __nv_bfloat16* source = lane < kWarpKeys ? p.kv.keys : p.kv.values;
    const auto key_position = [&](int tile) { return min(first_key + tile * kWarpKeys + lane % kWarpKeys, position); };
    // The lane's row of a key (its block-table lookup), and its copy into a stage.
    const auto row_of = [&](int pos) { return source + key_slot(p, table, pos) * kv_heads * HeadDim; };
    const auto copy_row = [&](const __nv_bfloat16* row, int stage) {
      bulk_copy_g2s(tiles + (2 * stage + lane / kWarpKeys) * tensor_elems + (lane % kWarpKeys) * row_stride, row,
                    row_bytes, &full[stage]);
    };
    // Stage n % stages takes the share's tile n once the consumers are done with its tile n - stages.
    const auto announce = [&](int n) {
      const int stage = n % stages;
      if (n >= stages) mbarrier_wait_parity(&empty[stage], (n / stages - 1) & 1);
      if (lane == 0) mbarrier_arrive_expect_tx(&full[stage], 2 * kWarpKeys * row_bytes);
      __syncwarp();
      return stage;
    };
    const int first = min(stages, share_tiles);
    for (int n = 0; n < first; ++n) {
      const int pos = key_position(share + n * shares);
      const int stage = announce(n);
      if (pos < cached_before_step) copy_row(row_of(pos), stage);
    }
    if (p.batch_from_host) wait_for_prior_grids();
    allow_dependent_grids();
    for (int n = 0; n < first; ++n) {
      const int pos = key_position(share + n * shares);
      if (pos >= cached_before_step) copy_row(row_of(pos), n);
    }
    for (int n = first; n < share_tiles; ++n) {
      // The block-table lookup before the wait for a free stage, so that its round trip overlaps the wait.
      const __nv_bfloat16* row = row_of(key_position(share + n * shares));
      copy_row(row, announce(n));
    }
    return;
  }

  if (p.batch_from_host) wait_for_prior_grids();
  allow_dependent_grids();
  WarpState<HeadDim> state;
  start_warp<HeadDim>(state, p, token, warp);
  const float score_scale = p.shape.scale * kLog2e;
  for (int n = 0; n < share_tiles; ++n) {
    const int stage = n % stages;
    mbarrier_wait_parity(&full[stage], (n / stages) & 1);
    const __nv_bfloat16* k_tile = tiles + 2 * stage * tensor_elems + warp * HeadDim;
    attend_keys<HeadDim>(state, PaddedRows{k_tile, row_stride}, PaddedRows{k_tile + tensor_elems, row_stride},
                         first_key + (share + n * shares) * kWarpKeys, first_key, position + 1, score_scale);
    mbarrier_arrive(&empty[stage]);  // every lane, after its own reads of the stage
  }
  write_warp_share<HeadDim>(p, state, item, token, warp);
}

template <int HeadDim, int Warps, int Stages, bool Pages, bool Fp8 = false>
void launch_chunk_kernel(const DecodeAttentionParams& params, const KvPageMaps& maps, cudaStream_t stream) {
  constexpr size_t smem = Layout<HeadDim, Warps, Stages, Pages, Fp8>::kSharedBytes;
  auto kernel = chunk_kernel<HeadDim, Warps, Stages, Pages, Fp8>;
  // The whole shared-memory carveout, so that as many blocks as possible fit on an SM.
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (err == cudaSuccess) {
    err = cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared);
  }
  if (err != cudaSuccess) throw std::runtime_error(std::string("decode attention: ") + cudaGetErrorString(err));
  const dim3 grid(params.num_items, params.shape.num_kv_heads);
  launch_dependent("decode attention", kernel, grid, Warps * 32, smem, stream, params, maps);
}

// Whether chunk_kernel can bring the cache's keys in pages: whole pages in a block, slots that a tensor map's
// 32-bit coordinates reach.
inline bool pages_fit(const PagedKv& kv) {
  return kv.block_size % kWarpKeys == 0 && kv.num_slots > 0 && kv.num_slots <= INT32_MAX;
}

// Keys (values) viewed as [64-column blocks of every head's row][num_slots][64 columns]: the column blocks are
// 128 bytes apart and the slots a row apart, a stride order a tensor map allows, so that a box of 16 slots and a
// head's column blocks lands as smem_swizzle.h's tile, column block after column block. (A box per column block,
// two copies a page for head_dim 128: batch 8 at 32K keys 92-93% of the copy bandwidth against 94%.)
template <int HeadDim>
KvPageMaps kv_page_maps(const DecodeAttentionParams& p) {
  const uint64_t column_blocks = static_cast<uint64_t>(p.shape.num_kv_heads) * HeadDim / 64;
  const uint64_t dims[3] = {64, static_cast<uint64_t>(p.kv.num_slots), column_blocks};
  const uint64_t byte_strides[2] = {column_blocks * 64 * sizeof(__nv_bfloat16), 64 * sizeof(__nv_bfloat16)};
  const uint32_t box[3] = {64, kWarpKeys, HeadDim / 64};
  return {bf16_tensor_map_3d_swizzle128(p.kv.keys, dims, byte_strides, box),
          bf16_tensor_map_3d_swizzle128(p.kv.values, dims, byte_strides, box)};
}

// An FP8 cache's codes as [num_slots][every head's HeadDim codes]: a box is one KV head's page of 16 slots.
template <int HeadDim>
KvPageMaps fp8_kv_page_maps(const DecodeAttentionParams& p) {
  const uint64_t row_bytes = static_cast<uint64_t>(p.shape.num_kv_heads) * HeadDim;
  const uint64_t slots = static_cast<uint64_t>(p.kv.num_slots);
  return {byte_tensor_map_2d_swizzled(p.kv.key_codes, row_bytes, slots, row_bytes, HeadDim, kWarpKeys),
          byte_tensor_map_2d_swizzled(p.kv.value_codes, row_bytes, slots, row_bytes, HeadDim, kWarpKeys)};
}

// chunk_kernel on page copies: the whole-context plan's shape or the default one.
template <int HeadDim, bool Fp8>
void launch_page_kernel(const DecodeAttentionParams& params, const KvPageMaps& maps, cudaStream_t stream) {
  if (params.whole_context) {
    launch_chunk_kernel<HeadDim, kWholeContextWarps, kWholeContextStages, true, Fp8>(params, maps, stream);
  } else {
    launch_chunk_kernel<HeadDim, kDefaultWarps, kDefaultStages, true, Fp8>(params, maps, stream);
  }
}

}  // namespace decode_mma

template <int HeadDim>
void launch_decode_attention_mma(const DecodeAttentionParams& params, cudaStream_t stream) {
  using namespace decode_mma;
  if (!pages_fit(params.kv)) {
    if (params.kv.fp8()) {
      throw std::invalid_argument("decode attention: an FP8 KV cache needs blocks of a multiple of 16 tokens");
    }
    launch_chunk_kernel<HeadDim, kDefaultWarps, kDefaultStages, false>(params, KvPageMaps{}, stream);
    return;
  }
  if (params.kv.fp8()) {
    launch_page_kernel<HeadDim, true>(params, fp8_kv_page_maps<HeadDim>(params), stream);
  } else {
    launch_page_kernel<HeadDim, false>(params, kv_page_maps<HeadDim>(params), stream);
  }
}

template <int HeadDim>
void launch_decode_attention_all_heads(const DecodeAttentionParams& params, cudaStream_t stream) {
  using namespace decode_mma;
  const int kv_heads = params.shape.num_kv_heads;
  const int stages = all_heads_stages(kv_heads, HeadDim);
  auto kernel = all_heads_kernel<HeadDim>;
  const cudaError_t err =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kAllHeadsSharedBytes);
  if (err != cudaSuccess) throw std::runtime_error(std::string("decode attention: ") + cudaGetErrorString(err));
  launch_dependent("decode attention", kernel, dim3(params.num_items), dim3((kv_heads + 1) * 32),
                   stages * all_heads_stage_bytes(kv_heads, HeadDim), stream, params, stages);
}

}  // namespace tern::kernels
