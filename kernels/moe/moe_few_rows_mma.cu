#include <stdexcept>
#include <string>

#include "common/dependent_launch.cuh"
#include "elementwise/gated_activation_device.cuh"
#include "linear/weight_mma_fragments.cuh"
#include "moe/moe_few_rows_mma.h"

namespace tern::kernels {

namespace {

constexpr int kWarps = 8;
constexpr int kInFlight = 4;        // column groups a lane has loads in flight for (linear/few_rows_gemm's measure)

// Rows g and g + 8 of a block's 16 weight rows of one expert, as lane (g, t) reads them a column group at a time:
// block FP8 (64 columns a group, the rows' 128-row block scales; each expert has its own grid of scales) or bf16
// (32 columns). scaled_products gives a group's products with lane g's x row as the mma's accumulators.
struct Fp8ExpertRows {
  static constexpr int kGroupColumns = fp8_mma::kGroupColumns;
  const char* lo;
  const char* hi;
  const float* lo_scales;
  const float* hi_scales;

  __device__ Fp8ExpertRows(const MoeGemmParams& p, int expert, int lo_row, int hi_row, int t)
      : lo(codes_of(p, expert, lo_row, t)),
        hi(codes_of(p, expert, hi_row, t)),
        lo_scales(scales_of(p, expert, lo_row)),
        hi_scales(scales_of(p, expert, hi_row)) {}

  __device__ __forceinline__ void load(int group, uint4 (&w)[2]) const {
    w[0] = load_streaming(lo + static_cast<int64_t>(kGroupColumns) * group);
    w[1] = load_streaming(hi + static_cast<int64_t>(kGroupColumns) * group);
  }

  __device__ __forceinline__ void scaled_products(const uint4 (&w)[2], const __nv_bfloat16* x_row, int group, int t,
                                                  float (&sums)[4]) const {
    uint32_t x[1][8];
    fp8_mma::load_x_words(x_row, group * kGroupColumns + 16 * t, x[0]);
    float group_sums[1][4];
    fp8_mma::group_products<1>(w[0], w[1], x, group_sums);
    const float lo_scale = __ldg(lo_scales + group * kGroupColumns / 128);
    const float hi_scale = __ldg(hi_scales + group * kGroupColumns / 128);
    sums[0] = lo_scale * group_sums[0][0];
    sums[1] = lo_scale * group_sums[0][1];
    sums[2] = hi_scale * group_sums[0][2];
    sums[3] = hi_scale * group_sums[0][3];
  }

 private:
  __device__ static const char* codes_of(const MoeGemmParams& p, int expert, int row, int t) {
    return reinterpret_cast<const char*>(p.fp8.codes) + (static_cast<int64_t>(expert) * p.n + row) * p.k + 16 * t;
  }
  __device__ static const float* scales_of(const MoeGemmParams& p, int expert, int row) {
    return p.fp8.scales + (static_cast<int64_t>(expert) * expert_scale_rows(p.n) + row / 128) * p.fp8.scale_stride;
  }
};

struct Bf16ExpertRows {
  static constexpr int kGroupColumns = bf16_mma::kGroupColumns;
  const __nv_bfloat16* lo;
  const __nv_bfloat16* hi;

  __device__ Bf16ExpertRows(const MoeGemmParams& p, int expert, int lo_row, int hi_row, int t)
      : lo(p.weight + (static_cast<int64_t>(expert) * p.n + lo_row) * p.k + 8 * t),
        hi(p.weight + (static_cast<int64_t>(expert) * p.n + hi_row) * p.k + 8 * t) {}

  __device__ __forceinline__ void load(int group, uint4 (&w)[2]) const {
    w[0] = load_streaming(lo + static_cast<int64_t>(kGroupColumns) * group);
    w[1] = load_streaming(hi + static_cast<int64_t>(kGroupColumns) * group);
  }

  __device__ __forceinline__ void scaled_products(const uint4 (&w)[2], const __nv_bfloat16* x_row, int group, int t,
                                                  float (&sums)[4]) const {
    bf16_mma::group_products(w[0], w[1], bf16_mma::load_x(x_row, group * kGroupColumns + 8 * t), sums);
  }
};

// acc[c] += each group's products of the rows and x's rows (lane g's row x_row, null past the tile's rows), over
// warp `warp`'s column groups.
template <typename ExpertRows>
__device__ void stream_rows(const MoeGemmParams& p, const ExpertRows& rows, const __nv_bfloat16* x_row,
                            int warp, int t, float (&acc)[4]) {
  const int groups = p.k / ExpertRows::kGroupColumns;
  uint4 loaded[kInFlight][2];
#pragma unroll
  for (int u = 0; u < kInFlight; ++u) {
    const int group = warp + u * kWarps;
    if (group < groups) rows.load(group, loaded[u]);
  }
  for (int first = 0; warp + first * kWarps < groups; first += kInFlight) {
#pragma unroll
    for (int u = 0; u < kInFlight; ++u) {
      const int group = warp + (first + u) * kWarps;
      if (group >= groups) break;
      float sums[4];
      rows.scaled_products(loaded[u], x_row, group, t, sums);
#pragma unroll
      for (int c = 0; c < 4; ++c) acc[c] += sums[c];
      const int ahead = group + kInFlight * kWarps;
      if (ahead < groups) rows.load(ahead, loaded[u]);
    }
  }
}

// A tile's rows times 16 weight rows of its expert: 16 consecutive output columns, or with Gated 8 gate rows and
// their 8 up rows (the A fragment's rows g and g + 8 hold gate c and up c of the same lane) for 8 columns of the
// activation. The tile's real rows come first (the grouping fills an expert's rows in order), 8 at a time; a pair
// tile is its pair's row alone.
template <bool Gated, typename ExpertRows>
__global__ void __launch_bounds__(kWarps * 32) tile_rows_kernel(const MoeGemmParams p) {
  wait_for_prior_grids();
  allow_dependent_grids();
  __shared__ int64_t source_row[kMoeTileRows];
  __shared__ float partial[kWarps][4][32];
  const int expert = p.tile_expert[blockIdx.y];
  if (expert < 0) return;
  const int64_t row0 = static_cast<int64_t>(blockIdx.y) * kMoeTileRows;
  const int32_t pair = threadIdx.x < kMoeTileRows ? p.row_pair[row0 + threadIdx.x] : -1;
  if (threadIdx.x < kMoeTileRows) source_row[threadIdx.x] = p.gather_by_pair ? pair / p.top_k : row0 + threadIdx.x;
  const int num_rows = __syncthreads_count(pair >= 0);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const int out_n = Gated ? p.n / 2 : p.n;
  const int first_column = blockIdx.x * (Gated ? 8 : 16);
  // Rows past the end read the last row; their sums are not written.
  const int lo_row = min(first_column + g, out_n - 1);
  const int hi_row = Gated ? lo_row + out_n : min(first_column + g + 8, p.n - 1);
  const ExpertRows rows(p, expert, lo_row, hi_row, t);
  const __nv_bfloat16* bias = p.bias ? p.bias + static_cast<int64_t>(expert) * p.n : nullptr;
  for (int r0 = 0; r0 < num_rows; r0 += 8) {
    float acc[4] = {};
    stream_rows(p, rows, r0 + g < num_rows ? p.input + source_row[r0 + g] * p.k : nullptr, warp, t, acc);
#pragma unroll
    for (int c = 0; c < 4; ++c) partial[warp][c][lane] = acc[c];
    __syncthreads();
    // Accumulator c of lane l: weight row l / 4 (+ 8 for c >= 2), tile row r0 + 2 (l % 4) + c % 2; the warps' sums
    // in warp order.
    const auto warps_sum = [&](int c, int l) {
      float sum = 0.0f;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) sum += partial[w][c][l];
      return sum;
    };
    if constexpr (Gated) {
      if (threadIdx.x < 64) {
        const int l = threadIdx.x % 32, half = threadIdx.x / 32;
        const int column = first_column + l / 4, row = r0 + 2 * (l % 4) + half;
        if (column < out_n && row < num_rows) {
          // Gate and up rounded to bf16 as the unfused path stores them.
          const float gate = __bfloat162float(
              __float2bfloat16(warps_sum(half, l) + (bias ? __bfloat162float(bias[column]) : 0.0f)));
          const float up = __bfloat162float(
              __float2bfloat16(warps_sum(2 + half, l) + (bias ? __bfloat162float(bias[column + out_n]) : 0.0f)));
          p.out[(row0 + row) * out_n + column] = __float2bfloat16(gated_activation(gate, up, p.activation));
        }
      }
    } else {
      if (threadIdx.x < 128) {
        const int c = threadIdx.x / 32, l = threadIdx.x % 32;
        const int column = first_column + l / 4 + (c >= 2 ? 8 : 0), row = r0 + 2 * (l % 4) + c % 2;
        if (column < p.n && row < num_rows) {
          p.out[(row0 + row) * p.n + column] =
              __float2bfloat16(warps_sum(c, l) + (bias ? __bfloat162float(bias[column]) : 0.0f));
        }
      }
    }
    __syncthreads();  // the next rows write `partial` again
  }
}

template <typename ExpertRows>
void launch_kernels(const MoeGemmParams& p, cudaStream_t stream) {
  const unsigned tiles = static_cast<unsigned>(p.max_tiles);
  if (p.fuse_gated_activation) {
    launch_dependent("moe_experts (few rows, mma)", tile_rows_kernel<true, ExpertRows>, dim3((p.n / 2 + 7) / 8, tiles),
                     kWarps * 32, 0, stream, p);
  } else {
    launch_dependent("moe_experts (few rows, mma)", tile_rows_kernel<false, ExpertRows>, dim3((p.n + 15) / 16, tiles),
                     kWarps * 32, 0, stream, p);
  }
}

}  // namespace

bool moe_few_rows_mma_supports(const MoeGemmParams& p) {
  if (!p.few_rows || p.pair_expert) return false;
  if (p.fp8.codes) return p.k % Fp8ExpertRows::kGroupColumns == 0;
  return p.weight && p.k % Bf16ExpertRows::kGroupColumns == 0;
}

void launch_moe_few_rows_mma(const MoeGemmParams& p, cudaStream_t stream) {
  if (!moe_few_rows_mma_supports(p)) {
    throw std::invalid_argument(
        "moe_few_rows_mma: bf16 or block-FP8 experts with few rows and K a multiple of 32 (bf16) or 64 (FP8), got K "
        "= " + std::to_string(p.k));
  }
  if (p.fp8.codes) {
    launch_kernels<Fp8ExpertRows>(p, stream);
  } else {
    launch_kernels<Bf16ExpertRows>(p, stream);
  }
}

}  // namespace tern::kernels
