#include <stdexcept>
#include <string>

#include "common/device_math.cuh"
#include "moe/moe_experts.h"

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
constexpr int kMaxGroupExperts = 4096;

// One block: counts the pairs of each local expert, lays the experts' rows out padded to whole tiles, then
// scatters the pairs into their expert's rows (in no particular order within an expert: rows are independent).
__global__ void group_pairs_kernel(const int32_t* expert_ids, int64_t num_pairs, int first_expert, int num_experts,
                                   int64_t max_tiles, MoeGrouping g) {
  __shared__ int counts[kMaxGroupExperts];
  __shared__ int cursor[kMaxGroupExperts];
  for (int e = threadIdx.x; e < num_experts; e += blockDim.x) counts[e] = 0;
  for (int64_t r = threadIdx.x; r < max_tiles * kMoeTileRows; r += blockDim.x) g.row_pair[r] = -1;
  for (int64_t b = threadIdx.x; b < max_tiles; b += blockDim.x) g.tile_expert[b] = -1;
  __syncthreads();
  for (int64_t i = threadIdx.x; i < num_pairs; i += blockDim.x) {
    const int e = expert_ids[i] - first_expert;
    if (e >= 0 && e < num_experts) atomicAdd(&counts[e], 1);
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int row = 0;
    for (int e = 0; e < num_experts; ++e) {
      cursor[e] = row;
      g.expert_rows[e] = row;
      row += (counts[e] + kMoeTileRows - 1) / kMoeTileRows * kMoeTileRows;
    }
    g.expert_rows[num_experts] = row;
  }
  __syncthreads();
  for (int e = threadIdx.x; e < num_experts; e += blockDim.x) {
    const int first_tile = cursor[e] / kMoeTileRows;
    const int tiles = (counts[e] + kMoeTileRows - 1) / kMoeTileRows;
    for (int b = 0; b < tiles; ++b) g.tile_expert[first_tile + b] = e;
  }
  __syncthreads();
  for (int64_t i = threadIdx.x; i < num_pairs; i += blockDim.x) {
    const int e = expert_ids[i] - first_expert;
    if (e >= 0 && e < num_experts) {
      const int row = atomicAdd(&cursor[e], 1);
      g.pair_row[i] = row;
      g.row_pair[row] = static_cast<int32_t>(i);
    } else {
      g.pair_row[i] = -1;
    }
  }
}

// A 64 x 128 output tile per block of 4 warps (2 x 2, each 32 rows x 64 columns as 2 x 8 mma.sync m16n8k16
// fragments fed by ldmatrix), k in steps of 32 brought by cp.async through three stages. Rows of the A tile are
// gathered through row_pair.
constexpr int kTileN = 128;
constexpr int kTileK = 32;
constexpr int kStages = 3;
constexpr int kPad = 8;  // bf16 elements of padding per shared row: spreads ldmatrix rows over the banks
constexpr int kRowStride = kTileK + kPad;
constexpr int kGemmThreads = 128;

__global__ void __launch_bounds__(kGemmThreads) grouped_gemm_kernel(MoeGemmParams p) {
  const int expert = p.tile_expert[blockIdx.y];
  if (expert < 0) return;
  __shared__ alignas(128) __nv_bfloat16 a_tile[kStages][kMoeTileRows * kRowStride];
  __shared__ alignas(128) __nv_bfloat16 b_tile[kStages][kTileN * kRowStride];

  const int64_t row0 = static_cast<int64_t>(blockIdx.y) * kMoeTileRows;
  const int n0 = blockIdx.x * kTileN;
  const __nv_bfloat16* weight = p.weight + static_cast<int64_t>(expert) * p.n * p.k;

  // Per stage each thread copies 16 bytes of 2 A rows (64 rows x 4 chunks) and of 4 B rows (128 x 4).
  const int chunk = threadIdx.x % 4;
  const __nv_bfloat16* a_src[2];
  const __nv_bfloat16* b_src[4];
  for (int i = 0; i < 2; ++i) {
    const int r = threadIdx.x / 4 + 32 * i;
    int64_t source_row = row0 + r;
    if (p.gather_by_pair) {
      const int32_t pair = p.row_pair[source_row];
      source_row = pair >= 0 ? pair / p.top_k : -1;
    }
    a_src[i] = source_row >= 0 ? p.input + source_row * p.k : nullptr;
  }
  for (int i = 0; i < 4; ++i) {
    const int n = n0 + threadIdx.x / 4 + 32 * i;
    b_src[i] = n < p.n ? weight + static_cast<int64_t>(n) * p.k : nullptr;
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
      for (int i = 0; i < 4; ++i) {
        const bool valid = b_src[i] && in_k;
        cp_async_16(&b_tile[stage][(threadIdx.x / 4 + 32 * i) * kRowStride + chunk * 8], valid ? b_src[i] + k : weight,
                    valid ? 16 : 0);
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
    const __nv_bfloat16* b = b_tile[kt % kStages];
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

__global__ void __launch_bounds__(kSkinnyWarps * 32) skinny_gemm_kernel(MoeGemmParams p) {
  const int expert = p.tile_expert[blockIdx.y];
  if (expert < 0) return;
  const int64_t row0 = static_cast<int64_t>(blockIdx.y) * kMoeTileRows;
  // A tile's real rows come first (the grouping fills an expert's rows in order); the rest are padding.
  __shared__ int64_t source_row[kMoeTileRows];
  const int32_t pair = threadIdx.x < kMoeTileRows ? p.row_pair[row0 + threadIdx.x] : -1;
  if (threadIdx.x < kMoeTileRows) source_row[threadIdx.x] = p.gather_by_pair ? pair / p.top_k : row0 + threadIdx.x;
  const int num_rows = __syncthreads_count(pair >= 0);
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int n = blockIdx.x * kSkinnyWarps + warp;
  if (n >= p.n) return;
  const __nv_bfloat16* weight = p.weight + (static_cast<int64_t>(expert) * p.n + n) * p.k;
  const float bias = p.bias ? __bfloat162float(p.bias[static_cast<int64_t>(expert) * p.n + n]) : 0.0f;
  for (int r0 = 0; r0 < num_rows; r0 += kSkinnyRows) {
    const int rows = min(kSkinnyRows, num_rows - r0);
    float acc[kSkinnyRows] = {};
    for (int k = lane * 8; k < p.k; k += 32 * 8) {
      float w[8];
      load_f32x8(weight + k, w);
#pragma unroll
      for (int r = 0; r < kSkinnyRows; ++r) {
        if (r >= rows) break;
        float a[8];
        load_f32x8(p.input + source_row[r0 + r] * p.k + k, a);
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[r] += w[j] * a[j];
      }
    }
#pragma unroll
    for (int r = 0; r < kSkinnyRows; ++r) acc[r] = warp_sum(acc[r]);
    if (lane == 0) {
      for (int r = 0; r < rows; ++r) p.out[(row0 + r0 + r) * p.n + n] = __float2bfloat16(acc[r] + bias);
    }
  }
}

__global__ void gather_inputs_kernel(const __nv_bfloat16* x, const int32_t* row_pair, int top_k,
                                     __nv_bfloat16* out, int hidden) {
  const int64_t r = blockIdx.x;
  const int32_t pair = row_pair[r];
  for (int c = threadIdx.x * 8; c < hidden; c += blockDim.x * 8) {
    uint4 v = make_uint4(0, 0, 0, 0);  // 8 bf16 zeros
    if (pair >= 0) v = *reinterpret_cast<const uint4*>(x + static_cast<int64_t>(pair / top_k) * hidden + c);
    *reinterpret_cast<uint4*>(out + r * hidden + c) = v;
  }
}

__global__ void combine_kernel(const __nv_bfloat16* rows, const int32_t* pair_row, const float* weights,
                               __nv_bfloat16* out, int top_k, int hidden) {
  const int64_t t = blockIdx.x;
  for (int h = threadIdx.x; h < hidden; h += blockDim.x) {
    float sum = 0.0f;
    for (int j = 0; j < top_k; ++j) {
      const int32_t row = pair_row[t * top_k + j];
      if (row >= 0) sum += weights[t * top_k + j] * __bfloat162float(rows[static_cast<int64_t>(row) * hidden + h]);
    }
    out[t * hidden + h] = __float2bfloat16(sum);
  }
}

}  // namespace

void launch_moe_group_pairs(const int32_t* expert_ids, int64_t num_pairs, int first_expert, int num_experts,
                            int64_t max_tiles, const MoeGrouping& grouping, cudaStream_t stream) {
  if (num_experts <= 0 || num_experts > kMaxGroupExperts) {
    throw std::invalid_argument("moe_experts: " + std::to_string(num_experts) + " local experts (at most " +
                                std::to_string(kMaxGroupExperts) + ")");
  }
  if (num_pairs == 0) return;
  group_pairs_kernel<<<1, kGroupThreads, 0, stream>>>(expert_ids, num_pairs, first_expert, num_experts, max_tiles,
                                                      grouping);
}

void launch_moe_grouped_gemm(const MoeGemmParams& p, cudaStream_t stream) {
  if (p.k % 8 != 0 || p.k <= 0 || p.n % 8 != 0 || p.n <= 0) {
    throw std::invalid_argument("moe_experts: GEMM of " + std::to_string(p.n) + " x " + std::to_string(p.k) +
                                " (both must be positive multiples of 8)");
  }
  if (p.max_tiles == 0) return;
  if (p.max_tiles > 65535) throw std::invalid_argument("moe_experts: too many rows for one launch");
  if (p.few_rows) {
    const dim3 grid((p.n + kSkinnyWarps - 1) / kSkinnyWarps, static_cast<unsigned>(p.max_tiles));
    skinny_gemm_kernel<<<grid, kSkinnyWarps * 32, 0, stream>>>(p);
    return;
  }
  const dim3 grid((p.n + kTileN - 1) / kTileN, static_cast<unsigned>(p.max_tiles));
  grouped_gemm_kernel<<<grid, kGemmThreads, 0, stream>>>(p);
}

void launch_moe_gather_inputs(const __nv_bfloat16* x, const int32_t* row_pair, int top_k, __nv_bfloat16* out,
                              int64_t num_rows, int hidden, cudaStream_t stream) {
  if (hidden % 8 != 0) throw std::invalid_argument("moe_experts: hidden size " + std::to_string(hidden) + " is not a multiple of 8");
  if (num_rows == 0) return;
  gather_inputs_kernel<<<static_cast<unsigned>(num_rows), 128, 0, stream>>>(x, row_pair, top_k, out, hidden);
}

void launch_moe_combine(const __nv_bfloat16* rows, const int32_t* pair_row, const float* weights,
                        __nv_bfloat16* out, int64_t num_tokens, int top_k, int hidden, cudaStream_t stream) {
  if (num_tokens == 0) return;
  combine_kernel<<<static_cast<unsigned>(num_tokens), 256, 0, stream>>>(rows, pair_row, weights, out, top_k, hidden);
}

}  // namespace tern::kernels
