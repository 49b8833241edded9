#include <mma.h>

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

// A 64 x 64 output tile per block of 4 warps (each 32 x 32 as 2 x 2 WMMA fragments), k in steps of 32 brought
// by cp.async into two stages. Rows of the A tile are gathered through row_pair.
constexpr int kTileN = 64;
constexpr int kTileK = 32;
constexpr int kPad = 8;  // bf16 elements of padding per shared row: breaks bank conflicts, keeps 16-byte rows
constexpr int kGemmThreads = 128;

__global__ void __launch_bounds__(kGemmThreads) grouped_gemm_kernel(MoeGemmParams p) {
  using namespace nvcuda;
  const int expert = p.tile_expert[blockIdx.y];
  if (expert < 0) return;
  __shared__ alignas(128) __nv_bfloat16 a_tile[2][kMoeTileRows][kTileK + kPad];
  __shared__ alignas(128) __nv_bfloat16 b_tile[2][kTileN][kTileK + kPad];
  __shared__ alignas(128) float c_tile[kMoeTileRows][kTileN + 4];

  const int64_t row0 = static_cast<int64_t>(blockIdx.y) * kMoeTileRows;
  const int n0 = blockIdx.x * kTileN;
  const __nv_bfloat16* weight = p.weight + static_cast<int64_t>(expert) * p.n * p.k;

  // Each thread copies 16 bytes of 2 rows of A and 2 rows of B per stage: 64 rows x 4 chunks = 256 chunks each.
  const __nv_bfloat16* a_src[2];
  const __nv_bfloat16* b_src[2];
  int chunk[2], a_row[2];
  for (int i = 0; i < 2; ++i) {
    const int c = threadIdx.x + i * kGemmThreads;
    a_row[i] = c / 4;
    chunk[i] = c % 4;
    int64_t source_row = row0 + a_row[i];
    if (p.gather_by_pair) {
      const int32_t pair = p.row_pair[source_row];
      source_row = pair >= 0 ? pair / p.top_k : -1;
    }
    a_src[i] = source_row >= 0 ? p.input + source_row * p.k : nullptr;
    const int n = n0 + a_row[i];
    b_src[i] = n < p.n ? weight + static_cast<int64_t>(n) * p.k : nullptr;
  }
  const auto load_stage = [&](int stage, int k0) {
    for (int i = 0; i < 2; ++i) {
      const int k = k0 + chunk[i] * 8;
      const bool in_k = k < p.k;
      cp_async_16(&a_tile[stage][a_row[i]][chunk[i] * 8], a_src[i] && in_k ? a_src[i] + k : p.input,
                  a_src[i] && in_k ? 16 : 0);
      cp_async_16(&b_tile[stage][a_row[i]][chunk[i] * 8], b_src[i] && in_k ? b_src[i] + k : weight,
                  b_src[i] && in_k ? 16 : 0);
    }
    cp_async_commit();
  };

  const int warp = threadIdx.x / 32;
  const int warp_m = (warp / 2) * 32;
  const int warp_n = (warp % 2) * 32;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][2];
  for (auto& row : acc)
    for (auto& f : row) wmma::fill_fragment(f, 0.0f);

  const int num_k_tiles = (p.k + kTileK - 1) / kTileK;
  load_stage(0, 0);
  for (int kt = 0; kt < num_k_tiles; ++kt) {
    const int stage = kt % 2;
    if (kt + 1 < num_k_tiles) {
      load_stage(stage ^ 1, (kt + 1) * kTileK);
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kTileK; kk += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> a[2];
      wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> b[2];
      for (int i = 0; i < 2; ++i) wmma::load_matrix_sync(a[i], &a_tile[stage][warp_m + 16 * i][kk], kTileK + kPad);
      for (int j = 0; j < 2; ++j) wmma::load_matrix_sync(b[j], &b_tile[stage][warp_n + 16 * j][kk], kTileK + kPad);
      for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 2; ++j) wmma::mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
    }
    __syncthreads();  // the next iteration's copies overwrite this stage
  }

  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j)
      wmma::store_matrix_sync(&c_tile[warp_m + 16 * i][warp_n + 16 * j], acc[i][j], kTileN + 4, wmma::mem_row_major);
  __syncthreads();
  const __nv_bfloat16* bias = p.bias ? p.bias + static_cast<int64_t>(expert) * p.n : nullptr;
  for (int i = threadIdx.x; i < kMoeTileRows * kTileN; i += kGemmThreads) {
    const int r = i / kTileN;
    const int c = i % kTileN;
    if (n0 + c >= p.n) continue;
    const float v = c_tile[r][c] + (bias ? __bfloat162float(bias[n0 + c]) : 0.0f);
    p.out[(row0 + r) * p.n + n0 + c] = __float2bfloat16(v);
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
  if (p.k % 8 != 0 || p.k <= 0 || p.n <= 0) {
    throw std::invalid_argument("moe_experts: GEMM of " + std::to_string(p.n) + " x " + std::to_string(p.k) +
                                " (k must be a positive multiple of 8)");
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
