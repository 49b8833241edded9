#include <algorithm>
#include <stdexcept>
#include <string>

#include "common/dependent_launch.cuh"
#include "common/device_math.cuh"
#include "elementwise/gated_activation_device.cuh"
#include "linear/bf16_gemm.h"
#include "linear/fp8_gemm.h"
#include "moe/moe_experts.h"
#include "moe/moe_few_rows_mma.h"

namespace tern::kernels {

int64_t moe_max_tiles(int64_t num_pairs, int64_t num_experts) {
  // Each expert with pairs adds at most one partly filled tile; no tile is empty.
  const int64_t bound = (num_pairs + kMoeTileRows - 1) / kMoeTileRows + (num_experts < num_pairs ? num_experts : num_pairs);
  return bound < num_pairs ? bound : num_pairs;
}

bool moe_few_rows(int64_t num_pairs, int64_t num_experts) {
  // Measured on Qwen3-30B-A3B shapes (128 experts, top 8): at batch 1 (8 pairs) the warp per column took decode
  // from 3.77 to 3.22 ms per token; at batch 128 (1,024 pairs, 8 rows per expert) it was 2.4 times slower than the
  // tiles, every warp re-reading its rows from L2. Up to 2 rows per expert on average it reads the weights once.
  return num_pairs <= 2 * num_experts;
}

namespace {

constexpr int kGroupThreads = 1024;
constexpr int kGroupWarps = kGroupThreads / 32;
constexpr int kMaxGroupExperts = 4096;
constexpr int kGroupExpertsPerThread = kMaxGroupExperts / kGroupThreads;
static_assert(kGroupWarps == 32, "the scan of the warps' totals is one warp's scan");

__device__ __forceinline__ int padded_rows(int pairs) {
  return (pairs + kMoeTileRows - 1) / kMoeTileRows * kMoeTileRows;
}

// Inclusive prefix sum over the warp's lanes.
__device__ __forceinline__ int warp_inclusive_sum(int v) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int offset = 1; offset < 32; offset <<= 1) {
    const int other = __shfl_up_sync(0xffffffffu, v, offset);
    if (lane >= offset) v += other;
  }
  return v;
}

// One block: counts the pairs of each local expert, lays the experts' rows out padded to whole tiles (a block-wide
// scan: each thread takes kGroupExpertsPerThread consecutive experts), then scatters the pairs into their expert's
// rows (in no particular order within an expert: rows are independent). Decode steps have a few pairs and the
// kernel is pure latency, so every phase is parallel and the block meets at four barriers only.
__global__ void __launch_bounds__(kGroupThreads) group_pairs_kernel(const int32_t* expert_ids, int64_t num_pairs,
                                                                    int first_expert, int num_experts,
                                                                    int64_t max_tiles, MoeGrouping g) {
  __shared__ int counts[kMaxGroupExperts];  // pairs of each expert, then the next free row of each
  __shared__ int warp_rows[kGroupWarps];
  wait_for_prior_grids();
  allow_dependent_grids();
  const auto local_expert = [&](int64_t i) {
    const int e = expert_ids[i] - first_expert;
    return e >= 0 && e < num_experts ? e : -1;
  };
  // A thread's first pair (all of them at decode) is read before the barrier, overlapping the clearing.
  const int first_pair_expert = threadIdx.x < num_pairs ? local_expert(threadIdx.x) : -1;
  for (int e = threadIdx.x; e < num_experts; e += kGroupThreads) counts[e] = 0;
  for (int64_t r = threadIdx.x; r < max_tiles * kMoeTileRows; r += kGroupThreads) g.row_pair[r] = -1;
  for (int64_t b = threadIdx.x; b < max_tiles; b += kGroupThreads) g.tile_expert[b] = -1;
  __syncthreads();
  if (first_pair_expert >= 0) atomicAdd(&counts[first_pair_expert], 1);
  for (int64_t i = threadIdx.x + kGroupThreads; i < num_pairs; i += kGroupThreads) {
    const int e = local_expert(i);
    if (e >= 0) atomicAdd(&counts[e], 1);
  }
  __syncthreads();

  const int first = threadIdx.x * kGroupExpertsPerThread;
  int pairs[kGroupExpertsPerThread];
  int rows = 0;
#pragma unroll
  for (int k = 0; k < kGroupExpertsPerThread; ++k) {
    pairs[k] = first + k < num_experts ? counts[first + k] : 0;
    rows += padded_rows(pairs[k]);
  }
  const int inclusive = warp_inclusive_sum(rows);
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (lane == 31) warp_rows[warp] = inclusive;
  __syncthreads();  // also: every count is read, so counts[] may now hold the cursors
  const int warps_inclusive = warp_inclusive_sum(warp_rows[lane]);
  const int warp_start = __shfl_sync(0xffffffffu, warps_inclusive, warp > 0 ? warp - 1 : 0);
  int row = (warp > 0 ? warp_start : 0) + inclusive - rows;
#pragma unroll
  for (int k = 0; k < kGroupExpertsPerThread; ++k) {
    const int e = first + k;
    if (e >= num_experts) break;
    g.expert_rows[e] = row;
    counts[e] = row;
    for (int b = 0; b < pairs[k]; b += kMoeTileRows) g.tile_expert[(row + b) / kMoeTileRows] = e;
    row += padded_rows(pairs[k]);
  }
  if (threadIdx.x == kGroupThreads - 1) g.expert_rows[num_experts] = row;  // the last thread ends at the total
  __syncthreads();

  const auto place = [&](int64_t i, int e) {
    if (e >= 0) {
      const int r = atomicAdd(&counts[e], 1);
      g.pair_row[i] = r;
      g.row_pair[r] = static_cast<int32_t>(i);
    } else {
      g.pair_row[i] = -1;
    }
  };
  if (threadIdx.x < num_pairs) place(threadIdx.x, first_pair_expert);
  for (int64_t i = threadIdx.x + kGroupThreads; i < num_pairs; i += kGroupThreads) place(i, local_expert(i));
}

// MXFP4 experts over tiles (W4A16: Hopper has no FP4 tensor cores; bf16 and block-FP8 experts take the TMA GEMMs
// of linear/bf16_gemm.h and linear/fp8_gemm.h): a 64 x 128 output tile per block of 4 warps (2 x 2, each 32 rows x
// 64 columns as 2 x 8 mma.sync m16n8k16 fragments fed by ldmatrix), k in steps of 32 brought by cp.async through
// three stages. Rows of the A tile are gathered through row_pair.
constexpr int kTileN = 128;
constexpr int kTileK = 32;
constexpr int kStages = 3;
constexpr int kPad = 8;  // bf16 elements of padding per shared row: spreads ldmatrix rows over the banks
constexpr int kRowStride = kTileK + kPad;
constexpr int kGemmThreads = 128;
constexpr int kCodeBytes = kTileK / 2;  // a B tile row's e2m1 codes, one scale group
static_assert(kTileK == 32, "an MXFP4 tile row is one scale group");

// How the experts' weights are stored (MoeGemmParams): bf16, or codes with scales.
enum class ExpertFormat { bf16, fp8, mxfp4 };

// Row `row` of a B tile (kCodeBytes in shared memory, those of weight row `weight_row` of the [experts * n, k] rows
// from column k0) into bf16 values of the tile the mma loop reads.
__device__ __forceinline__ void dequantize_tile_row(const MoeGemmParams& p, const uint8_t* codes, int64_t weight_row,
                                                    int k0, __nv_bfloat16* out) {
  const float scale = e8m0_to_float(p.mxfp4.scales[weight_row * (p.k / 32) + k0 / 32]);
  const uint4 words = *reinterpret_cast<const uint4*>(codes);
  const uint32_t word[4] = {words.x, words.y, words.z, words.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    float values[8];
    e2m1x8_to_float8(word[i], scale, values);
    store_f32x8(out + 8 * i, values);
  }
}

// B tiles arrive as codes (a quarter of the bytes through cp.async) and each thread dequantizes one row of the stage
// to bf16 before the mma loop reads it.
__global__ void __launch_bounds__(kGemmThreads) mxfp4_tiles_kernel(MoeGemmParams p) {
  static_assert(kGemmThreads == kTileN, "a thread copies and dequantizes one B row");
  wait_for_prior_grids();
  allow_dependent_grids();
  const int expert = p.tile_expert[blockIdx.y];
  if (expert < 0) return;
  __shared__ alignas(128) __nv_bfloat16 a_tile[kStages][kMoeTileRows * kRowStride];
  __shared__ alignas(128) __nv_bfloat16 b_tile[kTileN * kRowStride];
  __shared__ alignas(128) uint8_t b_codes[kStages][kTileN * kCodeBytes];

  const int64_t row0 = static_cast<int64_t>(blockIdx.y) * kMoeTileRows;
  const int n0 = blockIdx.x * kTileN;
  const int64_t expert_rows = static_cast<int64_t>(expert) * p.n;
  const uint8_t* codes_base = p.mxfp4.codes;  // also a valid address for empty copies
  const int64_t row_bytes = p.k / 2;
  const uint8_t* codes_row = nullptr;  // this thread's B row
  if (n0 + static_cast<int>(threadIdx.x) < p.n) codes_row = codes_base + (expert_rows + n0 + threadIdx.x) * row_bytes;

  // Per stage each thread copies 16 bytes of 2 A rows (64 rows x 4 chunks) and its B row's codes.
  const int chunk = threadIdx.x % 4;
  const __nv_bfloat16* a_src[2];
  for (int i = 0; i < 2; ++i) {
    const int r = threadIdx.x / 4 + 32 * i;
    int64_t source_row = row0 + r;
    if (p.gather_by_pair) {
      const int32_t pair = p.row_pair[source_row];
      source_row = pair >= 0 ? pair / p.top_k : -1;
    }
    a_src[i] = source_row >= 0 ? p.input + source_row * p.k : nullptr;
  }
  const int num_k_tiles = (p.k + kTileK - 1) / kTileK;
  const auto load_stage = [&](int kt) {
    if (kt < num_k_tiles) {
      const int stage = kt % kStages;
      const int k = kt * kTileK + chunk * 8;
      const bool in_k = k < p.k;
      for (int i = 0; i < 2; ++i) {
        const bool valid = a_src[i] && in_k;
        cp_async_16(&a_tile[stage][(threadIdx.x / 4 + 32 * i) * kRowStride + chunk * 8], valid ? a_src[i] + k : p.input,
                    valid ? 16 : 0);
      }
#pragma unroll
      for (int c = 0; c < kCodeBytes / 16; ++c) {
        const int64_t code_byte = static_cast<int64_t>(kt) * kCodeBytes + 16 * c;
        const bool valid = codes_row && code_byte < row_bytes;
        cp_async_16(&b_codes[stage][threadIdx.x * kCodeBytes + 16 * c],
                    valid ? codes_row + code_byte : codes_base, valid ? 16 : 0);
      }
    }
    cp_async_commit();  // empty groups too, so that every iteration waits for the same count
  };

  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int warp_m = (warp / 2) * 32;
  const int warp_n = (warp % 2) * 64;
  float acc[2][8][4] = {};

  for (int s = 0; s < kStages - 1; ++s) load_stage(s);
  const int mat = lane / 8;
  const int mat_row = lane % 8;
  for (int kt = 0; kt < num_k_tiles; ++kt) {
    cp_async_wait<kStages - 2>();
    __syncthreads();  // stage kt landed for every thread; stage kt - 1 is no longer read
    load_stage(kt + kStages - 1);
    const __nv_bfloat16* a = a_tile[kt % kStages];
    const __nv_bfloat16* b = b_tile;
    {  // the previous tile's mma reads of b_tile ended before the barrier above
      __nv_bfloat16* row = b_tile + threadIdx.x * kRowStride;
      if (codes_row) {
        dequantize_tile_row(p, &b_codes[kt % kStages][threadIdx.x * kCodeBytes],
                                    expert_rows + n0 + threadIdx.x, kt * kTileK, row);
      } else {
        for (int i = 0; i < kTileK; ++i) row[i] = __float2bfloat16(0.0f);
      }
      __syncthreads();
    }
#pragma unroll
    for (int kk = 0; kk < kTileK; kk += 16) {
      uint32_t a_frag[2][4];
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        ldmatrix_x4(a_frag[i], a + (warp_m + 16 * i + lane % 16) * kRowStride + kk + (lane / 16) * 8);
      }
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        uint32_t b_frag[4];  // k16 x n16: columns [16 j, 16 j + 8) in b_frag[0..1], the next 8 in [2..3]
        ldmatrix_x4(b_frag, b + (warp_n + 16 * j + (mat / 2) * 8 + mat_row) * kRowStride + kk + (mat % 2) * 8);
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          mma_bf16_16816(acc[i][2 * j], a_frag[i], b_frag[0], b_frag[1]);
          mma_bf16_16816(acc[i][2 * j + 1], a_frag[i], b_frag[2], b_frag[3]);
        }
      }
    }
  }
  cp_async_wait<0>();

  // Fragment (i, j): rows warp_m + 16 i + lane / 4 (+ 8), columns warp_n + 8 j + 2 (lane % 4) (+ 1).
  const __nv_bfloat16* bias = p.bias ? p.bias + static_cast<int64_t>(expert) * p.n : nullptr;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int n = n0 + warp_n + 8 * j + 2 * (lane % 4);
      if (n >= p.n) continue;  // p.n is even (a multiple of 8), so n + 1 < p.n too
      const float b0 = bias ? __bfloat162float(bias[n]) : 0.0f;
      const float b1 = bias ? __bfloat162float(bias[n + 1]) : 0.0f;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int64_t row = row0 + warp_m + 16 * i + lane / 4 + 8 * h;
        *reinterpret_cast<__nv_bfloat162*>(p.out + row * p.n + n) =
            __floats2bfloat162_rn(acc[i][j][2 * h] + b0, acc[i][j][2 * h + 1] + b1);
      }
    }
  }
}

// Few rows per expert (decode): a 64-row tile would stream each weight row through the tensor cores for one or two
// useful rows. Here a warp takes one output column of one tile's expert, reads its weight row once (16 bytes per
// lane, coalesced) and dots it with every real row of the tile, eight at a time; the rows are tiny and cached.
constexpr int kSkinnyWarps = 8;
constexpr int kSkinnyRows = 8;

// A lane's weights of a row per step, with their scale (one per lane: 16 codes lie in one 128-column block, 8 in one
// MXFP4 group), turned into float32 8 at a time: 8 bf16 or 16 e4m3 codes (16 bytes: a warp streams 512 contiguous
// bytes), or 8 e2m1 codes (4 bytes): with 32 e2m1 codes (16 bytes) a lane, MXFP4 experts at 16 tokens measured at
// least 1.4x slower on the H200 (bench/moe_experts_bench, docs/BENCHMARKS.md): a warp step then spans 1,024
// columns, so short rows leave lanes idle, and fewer loads are in flight.
template <ExpertFormat Format>
constexpr int kLaneWeights = Format == ExpertFormat::fp8 ? 16 : 8;

template <ExpertFormat Format>
struct LaneWeights {
  uint4 raw;
  float scale = 1.0f;

  // Weights [k, k + kLaneWeights) of row `column` of expert `expert`, row expert * n + column of the
  // [experts * n, k] rows (a block-FP8 expert's scales are its own grid, expert_scale_rows(n) rows of them).
  __device__ __forceinline__ void load(const MoeGemmParams& p, int expert, int column, int k) {
    const int64_t row = static_cast<int64_t>(expert) * p.n + column;
    if constexpr (Format == ExpertFormat::bf16) {
      raw = *reinterpret_cast<const uint4*>(p.weight + row * p.k + k);
    } else if constexpr (Format == ExpertFormat::fp8) {
      raw = *reinterpret_cast<const uint4*>(p.fp8.codes + row * p.k + k);
      const int64_t scale_row = static_cast<int64_t>(expert) * expert_scale_rows(p.n) + column / 128;
      scale = __ldg(p.fp8.scales + scale_row * p.fp8.scale_stride + k / 128);
    } else {
      raw.x = *reinterpret_cast<const uint32_t*>(p.mxfp4.codes + row * (p.k / 2) + k / 2);
      scale = e8m0_to_float(__ldg(p.mxfp4.scales + row * (p.k / 32) + k / 32));
    }
  }

  // Weights [8 c, 8 c + 8) of the lane's as float32.
  __device__ __forceinline__ void get8(int c, float (&w)[8]) const {
    const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
    if constexpr (Format == ExpertFormat::bf16) {
      const auto* pairs = reinterpret_cast<const __nv_bfloat162*>(words);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float2 f = __bfloat1622float2(pairs[i]);
        w[2 * i] = f.x;
        w[2 * i + 1] = f.y;
      }
    } else if constexpr (Format == ExpertFormat::fp8) {
      const auto* pairs = reinterpret_cast<const __nv_fp8x2_storage_t*>(words) + 4 * c;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float2 f = e4m3x2_to_float2(pairs[i]);
        w[2 * i] = f.x * scale;
        w[2 * i + 1] = f.y * scale;
      }
    } else {
      e2m1x8_to_float8(words[c], scale, w);
    }
  }
};

// The local expert of pair `pair` under pair tiles (MoeGemmParams::pair_expert), -1 when another rank holds it.
__device__ __forceinline__ int pair_local_expert(const MoeGemmParams& p, int64_t pair) {
  const int e = p.pair_expert[pair] - p.first_expert;
  return e >= 0 && e < p.num_experts ? e : -1;
}

// With Gated (MoeGemmParams::fuse_gated_activation) a warp takes gate column c and up column c + width of its rows
// (one read of each input row for both) and writes their activation, from gate and up rounded to bf16 as the
// unfused path stores them.
template <bool Gated, ExpertFormat Format>
__global__ void __launch_bounds__(kSkinnyWarps * 32) skinny_gemm_kernel(MoeGemmParams p) {
  constexpr int kColumns = Gated ? 2 : 1;
  wait_for_prior_grids();
  allow_dependent_grids();
  // A tile's real rows come first (the grouping fills an expert's rows in order); the rest are padding. A pair tile
  // is its pair's row alone.
  __shared__ int64_t source_row[kMoeTileRows];
  int expert, num_rows;
  int64_t row0;
  if (p.pair_expert) {
    expert = pair_local_expert(p, blockIdx.y);
    if (expert < 0) return;
    row0 = blockIdx.y;
    if (threadIdx.x == 0) source_row[0] = p.gather_by_pair ? row0 / p.top_k : row0;
    __syncthreads();
    num_rows = 1;
  } else {
    expert = p.tile_expert[blockIdx.y];
    if (expert < 0) return;
    row0 = static_cast<int64_t>(blockIdx.y) * kMoeTileRows;
    const int32_t pair = threadIdx.x < kMoeTileRows ? p.row_pair[row0 + threadIdx.x] : -1;
    if (threadIdx.x < kMoeTileRows) source_row[threadIdx.x] = p.gather_by_pair ? pair / p.top_k : row0 + threadIdx.x;
    num_rows = __syncthreads_count(pair >= 0);
  }
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int out_n = p.n / kColumns;
  const int n = blockIdx.x * kSkinnyWarps + warp;
  if (n >= out_n) return;
  float bias[kColumns];
#pragma unroll
  for (int j = 0; j < kColumns; ++j) {
    bias[j] = p.bias ? __bfloat162float(p.bias[static_cast<int64_t>(expert) * p.n + n + j * out_n]) : 0.0f;
  }
  for (int r0 = 0; r0 < num_rows; r0 += kSkinnyRows) {
    const int rows = min(kSkinnyRows, num_rows - r0);
    float acc[kColumns][kSkinnyRows] = {};
    constexpr int kStep = kLaneWeights<Format>;
    for (int k = lane * kStep; k < p.k; k += 32 * kStep) {
      LaneWeights<Format> lane_weights[kColumns];
#pragma unroll
      for (int j = 0; j < kColumns; ++j) lane_weights[j].load(p, expert, n + j * out_n, k);
#pragma unroll
      for (int c = 0; c < kStep / 8; ++c) {
        float w[kColumns][8];
#pragma unroll
        for (int j = 0; j < kColumns; ++j) lane_weights[j].get8(c, w[j]);
#pragma unroll
        for (int r = 0; r < kSkinnyRows; ++r) {
          if (r >= rows) break;
          float a[8];
          load_f32x8(p.input + source_row[r0 + r] * p.k + k + 8 * c, a);
#pragma unroll
          for (int j = 0; j < kColumns; ++j) {
#pragma unroll
            for (int i = 0; i < 8; ++i) acc[j][r] += w[j][i] * a[i];
          }
        }
      }
    }
#pragma unroll
    for (int j = 0; j < kColumns; ++j) {
#pragma unroll
      for (int r = 0; r < kSkinnyRows; ++r) acc[j][r] = warp_sum(acc[j][r]);
    }
    if (lane == 0) {
#pragma unroll
      for (int r = 0; r < kSkinnyRows; ++r) {
        if (r >= rows) break;
        __nv_bfloat16* out = p.out + (row0 + r0 + r) * out_n + n;
        if constexpr (Gated) {
          const float gate = __bfloat162float(__float2bfloat16(acc[0][r] + bias[0]));
          const float up = __bfloat162float(__float2bfloat16(acc[1][r] + bias[1]));
          *out = __float2bfloat16(gated_activation(gate, up, p.activation));
        } else {
          *out = __float2bfloat16(acc[0][r] + bias[0]);
        }
      }
    }
  }
}

// A down projection under pair tiles with pair_weights: token t's slots summed in the same kernel. A warp takes one
// output column for all of the token's slots, the weight rows of kSlotsInFlight slots' experts loaded together (a
// batch-1 step's short rows would leave little in flight a slot at a time; with FP8's 16 codes a lane, 8 slots'
// rows spilled registers). Each slot's product is rounded to bf16 (plus its bias) as the down GEMM stores it, then
// the slots are added weighted in slot order, as launch_moe_combine adds them: the same output as the grouped path.
constexpr int kMaxCombinedSlots = 64;
template <ExpertFormat Format>
constexpr int kSlotsInFlight = Format == ExpertFormat::fp8 ? 4 : 8;

template <ExpertFormat Format>
__global__ void __launch_bounds__(kSkinnyWarps * 32) skinny_combine_kernel(MoeGemmParams p) {
  __shared__ int slot_expert[kMaxCombinedSlots];
  __shared__ float slot_weight[kMaxCombinedSlots];
  wait_for_prior_grids();
  allow_dependent_grids();
  const int64_t first_pair = static_cast<int64_t>(blockIdx.y) * p.top_k;
  for (int j = threadIdx.x; j < p.top_k; j += blockDim.x) {
    slot_expert[j] = pair_local_expert(p, first_pair + j);
    slot_weight[j] = p.pair_weights[first_pair + j];
  }
  __syncthreads();
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int n = blockIdx.x * kSkinnyWarps + warp;
  if (n >= p.n) return;
  constexpr int kStep = kLaneWeights<Format>;
  constexpr int kSlots = kSlotsInFlight<Format>;
  float sum = 0.0f;
  for (int j0 = 0; j0 < p.top_k; j0 += kSlots) {
    int expert[kSlots];
#pragma unroll
    for (int s = 0; s < kSlots; ++s) expert[s] = j0 + s < p.top_k ? slot_expert[j0 + s] : -1;
    float acc[kSlots] = {};
    for (int k = lane * kStep; k < p.k; k += 32 * kStep) {
      // Every slot's weights and inputs are requested before any is used: an input loaded after its slot's
      // weights arrived would add a round trip to L2 per slot.
      LaneWeights<Format> lane_weights[kSlots];
      Bf16x8 inputs[kSlots][kStep / 8];
#pragma unroll
      for (int s = 0; s < kSlots; ++s) {
        if (expert[s] < 0) continue;
        lane_weights[s].load(p, expert[s], n, k);
#pragma unroll
        for (int c = 0; c < kStep / 8; ++c) {
          inputs[s][c] = *reinterpret_cast<const Bf16x8*>(p.input + (first_pair + j0 + s) * p.k + k + 8 * c);
        }
      }
#pragma unroll
      for (int c = 0; c < kStep / 8; ++c) {
#pragma unroll
        for (int s = 0; s < kSlots; ++s) {
          if (expert[s] < 0) continue;
          float w[8], a[8];
          lane_weights[s].get8(c, w);
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const float2 pair = __bfloat1622float2(inputs[s][c].pair[i]);
            a[2 * i] = pair.x;
            a[2 * i + 1] = pair.y;
          }
#pragma unroll
          for (int i = 0; i < 8; ++i) acc[s] += w[i] * a[i];  // the grouped path's order: the same sums
        }
      }
    }
#pragma unroll
    for (int s = 0; s < kSlots; ++s) acc[s] = warp_sum(acc[s]);
    if (lane == 0) {
#pragma unroll
      for (int s = 0; s < kSlots; ++s) {
        if (expert[s] < 0) continue;
        const float bias = p.bias ? __bfloat162float(p.bias[static_cast<int64_t>(expert[s]) * p.n + n]) : 0.0f;
        sum += slot_weight[j0 + s] * __bfloat162float(__float2bfloat16(acc[s] + bias));
      }
    }
  }
  if (lane == 0) p.out[static_cast<int64_t>(blockIdx.y) * p.n + n] = __float2bfloat16(sum);
}

// A block per (tile, kActivationColumns columns), a thread per 4 columns of a row (8-byte accesses: width is a
// multiple of 4 where the grouped GEMMs run), the block's threads spread over its tile's real rows.
constexpr int kActivationThreads = 128;
constexpr int kActivationVector = 4;
constexpr int kActivationColumns = kActivationThreads * kActivationVector;
static_assert(kActivationThreads >= kMoeTileRows, "a thread reads each row's pair");

struct alignas(8) Bf16x4 {
  __nv_bfloat162 pair[2];
};

__global__ void __launch_bounds__(kActivationThreads) moe_gated_activation_kernel(const __nv_bfloat16* gate_up,
                                                                                  __nv_bfloat16* out,
                                                                                  MoeGrouping g, int width,
                                                                                  GatedActivationSpec spec) {
  wait_for_prior_grids();
  allow_dependent_grids();
  const int64_t tile = blockIdx.x;
  if (g.tile_expert[tile] < 0) return;
  const int64_t row0 = tile * kMoeTileRows;
  // A tile's real rows come first (the grouping fills an expert's rows in order); the rest are padding.
  const int num_rows = __syncthreads_count(threadIdx.x < kMoeTileRows && g.row_pair[row0 + threadIdx.x] >= 0);
  const int c0 = blockIdx.y * kActivationColumns;
  const int vectors = min(kActivationColumns, width - c0) / kActivationVector;  // a row's in this block
  for (int i = threadIdx.x; i < num_rows * vectors; i += kActivationThreads) {
    const int64_t row = row0 + i / vectors;
    const int c = c0 + (i % vectors) * kActivationVector;
    const Bf16x4 gate = *reinterpret_cast<const Bf16x4*>(gate_up + row * 2 * width + c);
    const Bf16x4 up = *reinterpret_cast<const Bf16x4*>(gate_up + row * 2 * width + width + c);
    Bf16x4 v;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float2 gf = __bfloat1622float2(gate.pair[h]);
      const float2 uf = __bfloat1622float2(up.pair[h]);
      v.pair[h] = __floats2bfloat162_rn(gated_activation(gf.x, uf.x, spec), gated_activation(gf.y, uf.y, spec));
    }
    *reinterpret_cast<Bf16x4*>(out + row * width + c) = v;
  }
}

__global__ void gather_inputs_kernel(const __nv_bfloat16* x, const int32_t* row_pair, const int32_t* tile_expert,
                                     int top_k, __nv_bfloat16* out, int hidden) {
  wait_for_prior_grids();
  allow_dependent_grids();
  const int64_t r = blockIdx.x;
  if (tile_expert[r / kMoeTileRows] < 0) return;
  const int32_t pair = row_pair[r];
  for (int c = threadIdx.x * 8; c < hidden; c += blockDim.x * 8) {
    uint4 v = make_uint4(0, 0, 0, 0);  // 8 bf16 zeros
    if (pair >= 0) v = *reinterpret_cast<const uint4*>(x + static_cast<int64_t>(pair / top_k) * hidden + c);
    *reinterpret_cast<uint4*>(out + r * hidden + c) = v;
  }
}

// A block per (token, 512 columns): at decode a token's row spreads over several blocks (hidden 2048: 4) instead of
// one block walking it. The token's slots (pair_row, weights) come into shared memory once per block; each thread
// then brings its 8 columns of up to kCombineSlotsInFlight slot rows at once and sums them in slot order.
constexpr int kCombineThreads = 64;
constexpr int kCombineColumns = kCombineThreads * 8;
constexpr int kCombineSlotsInFlight = 8;

__global__ void __launch_bounds__(kCombineThreads) combine_kernel(const __nv_bfloat16* rows, const int32_t* pair_row,
                                                                  const float* weights, __nv_bfloat16* out,
                                                                  int top_k, int hidden) {
  extern __shared__ int32_t slot_rows[];  // [top_k], then the slots' weights [top_k]
  float* slot_weights = reinterpret_cast<float*>(slot_rows + top_k);
  wait_for_prior_grids();
  allow_dependent_grids();
  const int64_t t = blockIdx.x;
  for (int j = threadIdx.x; j < top_k; j += kCombineThreads) {
    slot_rows[j] = pair_row[t * top_k + j];
    slot_weights[j] = weights[t * top_k + j];
  }
  __syncthreads();
  const int c = blockIdx.y * kCombineColumns + threadIdx.x * 8;
  if (c >= hidden) return;
  float sum[8] = {};
  for (int j0 = 0; j0 < top_k; j0 += kCombineSlotsInFlight) {
    int32_t row[kCombineSlotsInFlight];
    Bf16x8 v[kCombineSlotsInFlight];
#pragma unroll
    for (int s = 0; s < kCombineSlotsInFlight; ++s) {
      row[s] = j0 + s < top_k ? slot_rows[j0 + s] : -1;
      if (row[s] >= 0) v[s] = *reinterpret_cast<const Bf16x8*>(rows + static_cast<int64_t>(row[s]) * hidden + c);
    }
#pragma unroll
    for (int s = 0; s < kCombineSlotsInFlight; ++s) {
      if (row[s] < 0) continue;
      const float w = slot_weights[j0 + s];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float2 f = __bfloat1622float2(v[s].pair[i]);
        sum[2 * i] += w * f.x;
        sum[2 * i + 1] += w * f.y;
      }
    }
  }
  store_f32x8(out + t * hidden + c, sum);
}

}  // namespace

void launch_moe_group_pairs(const int32_t* expert_ids, int64_t num_pairs, int first_expert, int num_experts,
                            int64_t max_tiles, const MoeGrouping& grouping, cudaStream_t stream) {
  if (num_experts <= 0 || num_experts > kMaxGroupExperts) {
    throw std::invalid_argument("moe_experts: " + std::to_string(num_experts) + " local experts (at most " +
                                std::to_string(kMaxGroupExperts) + ")");
  }
  if (num_pairs == 0) return;
  launch_dependent("moe_experts (grouping)", group_pairs_kernel, 1, kGroupThreads, 0, stream, expert_ids, num_pairs,
                   first_expert, num_experts, max_tiles, grouping);
}

namespace {

// out[r] = x[row_pair[r] / top_k] for the first `num_rows` rows, zeros for padding rows, nothing for the rows of
// tiles without an expert (tile_expert): the experts' inputs side by side, for the GEMMs that read contiguous rows.
void launch_gather_inputs(const __nv_bfloat16* x, const int32_t* row_pair, const int32_t* tile_expert,
                              int top_k, __nv_bfloat16* out, int64_t num_rows, int hidden, cudaStream_t stream) {
  if (hidden % 8 != 0) throw std::invalid_argument("moe_experts: hidden size " + std::to_string(hidden) + " is not a multiple of 8");
  if (num_rows == 0) return;
  launch_dependent("moe_experts (gather)", gather_inputs_kernel, static_cast<unsigned>(num_rows), 128, 0, stream, x,
                   row_pair, tile_expert, top_k, out, hidden);
}

// bf16 and block-FP8 experts over tiles: the rows side by side (gathered first where they are tokens' rows), then
// every expert's rows in one launch of the TMA GEMM; block-FP8 experts multiply the rows' e4m3 codes, quantized per
// row and 128 columns in each expert's own scale layout (W8A8, DeepSeek's dynamic scheme).
template <ExpertFormat Format>
void launch_tma_tiles(const MoeGemmParams& p, cudaStream_t stream) {
  constexpr bool kFp8 = Format == ExpertFormat::fp8;
  const int64_t max_rows = p.max_tiles * kMoeTileRows;
  if (!p.expert_rows || p.num_experts <= 0 || (p.gather_by_pair && !p.gathered) ||
      (kFp8 && (!p.row_codes || !p.row_scales)) || max_rows > 0x7fffffff) {
    throw std::invalid_argument("moe_experts: experts over tiles need the experts' rows" +
                                std::string(p.gather_by_pair ? ", a gathering buffer" : "") +
                                std::string(kFp8 ? " and buffers for the rows' codes and scales" : ""));
  }
  const __nv_bfloat16* x = p.input;
  if (p.gather_by_pair) {
    launch_gather_inputs(p.input, p.row_pair, p.tile_expert, p.top_k, p.gathered, max_rows, p.k, stream);
    x = p.gathered;
  }
  // The grouped product's fields both GEMMs have.
  const auto set_product = [&](auto& g) {
    g.bias = p.bias;
    g.out = p.out;
    g.m = static_cast<int>(max_rows);
    g.n = p.n;
    g.k = p.k;
    g.group_rows = p.expert_rows;
    g.num_groups = p.num_experts;
    g.routed_rows = p.routed_rows > 0 ? static_cast<int>(std::min(p.routed_rows, max_rows)) : 0;
  };
  if constexpr (kFp8) {
    launch_quantize_row_groups_fp8(x, p.expert_rows, p.num_experts, max_rows, p.k, p.row_codes, p.row_scales,
                                   stream);
    Fp8GemmParams f;
    set_product(f);
    f.x = p.row_codes;
    f.x_scales = p.row_scales;
    f.weight = p.fp8;
    f.group_weight_scales = expert_scale_rows(p.n) * p.fp8.scale_stride;
    launch_fp8_gemm(f, stream);
  } else {
    Bf16GemmParams g;
    set_product(g);
    g.x = x;
    g.weight = p.weight;
    launch_bf16_gemm(g, stream);
  }
}

template <ExpertFormat Format>
void launch_moe_gemm_kernel(const MoeGemmParams& p, cudaStream_t stream) {
  if (moe_few_rows_mma_supports(p)) return launch_moe_few_rows_mma(p, stream);
  if (p.pair_weights) {
    const dim3 grid((p.n + kSkinnyWarps - 1) / kSkinnyWarps, static_cast<unsigned>(p.max_tiles));
    launch_dependent("moe_experts", skinny_combine_kernel<Format>, grid, kSkinnyWarps * 32, 0, stream, p);
  } else if (p.fuse_gated_activation) {
    const dim3 grid((p.n / 2 + kSkinnyWarps - 1) / kSkinnyWarps, static_cast<unsigned>(p.max_tiles));
    launch_dependent("moe_experts", skinny_gemm_kernel<true, Format>, grid, kSkinnyWarps * 32, 0, stream, p);
  } else if (p.few_rows) {
    const dim3 grid((p.n + kSkinnyWarps - 1) / kSkinnyWarps, static_cast<unsigned>(p.max_tiles));
    launch_dependent("moe_experts", skinny_gemm_kernel<false, Format>, grid, kSkinnyWarps * 32, 0, stream, p);
  } else if constexpr (Format == ExpertFormat::mxfp4) {
    const dim3 grid((p.n + kTileN - 1) / kTileN, static_cast<unsigned>(p.max_tiles));
    launch_dependent("moe_experts", mxfp4_tiles_kernel, grid, kGemmThreads, 0, stream, p);
  } else {
    launch_tma_tiles<Format>(p, stream);
  }
}

}  // namespace

void launch_moe_grouped_gemm(const MoeGemmParams& p, cudaStream_t stream) {
  if (p.k % 8 != 0 || p.k <= 0 || p.n % 8 != 0 || p.n <= 0) {
    throw std::invalid_argument("moe_experts: GEMM of " + std::to_string(p.n) + " x " + std::to_string(p.k) +
                                " (both must be positive multiples of 8)");
  }
  const bool fp8 = p.fp8.codes != nullptr;
  const bool mxfp4 = p.mxfp4.codes != nullptr;
  if ((p.weight != nullptr) + fp8 + mxfp4 != 1) {
    throw std::invalid_argument("moe_experts: needs one of bf16, block-FP8 or MXFP4 expert weights");
  }
  if (fp8 && (p.k % 16 != 0 || !p.fp8.covers(p.k))) {
    throw std::invalid_argument("moe_experts: block-FP8 experts of " + std::to_string(p.n) + " x " +
                                std::to_string(p.k) + " (columns a multiple of 16, with their scales)");
  }
  if (mxfp4 && (p.k % 32 != 0 || !p.mxfp4.scales)) {
    throw std::invalid_argument("moe_experts: MXFP4 experts of " + std::to_string(p.n) + " x " + std::to_string(p.k) +
                                " (columns a multiple of 32, with their scales)");
  }
  if (p.fuse_gated_activation && !p.few_rows) {
    throw std::invalid_argument("moe_experts: the gated activation fuses into the few-rows GEMM only");
  }
  if (p.pair_expert && (!p.few_rows || p.num_experts <= 0)) {
    throw std::invalid_argument("moe_experts: pair tiles run the few-rows GEMM over the local experts");
  }
  if (p.pair_weights && (!p.pair_expert || p.fuse_gated_activation || p.top_k < 1 || p.top_k > kMaxCombinedSlots)) {
    throw std::invalid_argument("moe_experts: slots summed in the down GEMM need pair tiles, no fused activation and "
                                "top_k of 1 to " + std::to_string(kMaxCombinedSlots));
  }
  if (p.max_tiles == 0) return;
  if (p.max_tiles > 65535) throw std::invalid_argument("moe_experts: too many rows for one launch");
  if (fp8) {
    launch_moe_gemm_kernel<ExpertFormat::fp8>(p, stream);
  } else if (mxfp4) {
    launch_moe_gemm_kernel<ExpertFormat::mxfp4>(p, stream);
  } else {
    launch_moe_gemm_kernel<ExpertFormat::bf16>(p, stream);
  }
}

void launch_moe_gated_activation(const __nv_bfloat16* gate_up, __nv_bfloat16* out, const MoeGrouping& grouping,
                                 int64_t max_tiles, int width, const GatedActivationSpec& spec, cudaStream_t stream) {
  if (width <= 0 || width % kActivationVector != 0) {
    throw std::invalid_argument("moe_experts: activation width " + std::to_string(width) + " (a positive multiple of " +
                                std::to_string(kActivationVector) + ")");
  }
  if (max_tiles == 0) return;
  if (max_tiles > 0x7fffffff) throw std::invalid_argument("moe_experts: too many tiles for one activation");
  const dim3 grid(static_cast<unsigned>(max_tiles), (width + kActivationColumns - 1) / kActivationColumns);
  launch_dependent("moe_experts (activation)", moe_gated_activation_kernel, grid, kActivationThreads, 0, stream,
                   gate_up, out, grouping, width, spec);
}

void launch_moe_combine(const __nv_bfloat16* rows, const int32_t* pair_row, const float* weights,
                        __nv_bfloat16* out, int64_t num_tokens, int top_k, int hidden, cudaStream_t stream) {
  if (hidden % 8 != 0 || hidden <= 0) {
    throw std::invalid_argument("moe_experts: hidden size " + std::to_string(hidden) +
                                " for the combine (a positive multiple of 8)");
  }
  const size_t slot_bytes = static_cast<size_t>(top_k) * (sizeof(int32_t) + sizeof(float));
  if (top_k < 0 || slot_bytes > 48 * 1024) {
    throw std::invalid_argument("moe_experts: top_k " + std::to_string(top_k) + " for the combine (0 to " +
                                std::to_string(48 * 1024 / (sizeof(int32_t) + sizeof(float))) + ")");
  }
  if (num_tokens == 0) return;
  if (num_tokens > 0x7fffffff) throw std::invalid_argument("moe_experts: too many tokens for one combine");
  const dim3 grid(static_cast<unsigned>(num_tokens), (hidden + kCombineColumns - 1) / kCombineColumns);
  launch_dependent("moe_experts (combine)", combine_kernel, grid, kCombineThreads, slot_bytes, stream, rows, pair_row,
                   weights, out, top_k, hidden);
}

}  // namespace tern::kernels
