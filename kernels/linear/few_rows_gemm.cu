#include <stdexcept>
#include <string>

#include "common/dependent_launch.cuh"
#include "linear/few_rows_gemm.h"
#include "linear/weight_mma_fragments.cuh"

namespace tern::kernels {

namespace {

using namespace fp8_mma;

constexpr int kWarps = 8;
constexpr int kRows = 16;     // weight rows a block: the mma's m16
constexpr int kMaxRows = 16;  // x's rows: two n8 tiles
// Column groups whose loads a lane keeps in flight, in registers. Measured on an H100 (docs/BENCHMARKS.md): 8
// groups, or x's columns loaded a group ahead, or the groups in a ring in shared memory (cp.async, 6-12 groups)
// were all slower: more registers or shared memory a block leave fewer warps an SM.
constexpr int kInFlight = 4;

// Tiles: x's rows in n8 tiles (1 up to 8 rows, 2 up to 16). Warp w takes column groups w, w + kWarps, ...; the
// first kInFlight of them are requested before the wait for the kernel that writes x (weights are constants). In a
// batch-16 decode step those early requests slow the kernel before by as much as they save here (its loads queue
// behind them), but requesting one group early, or none, made the step slower still (docs/BENCHMARKS.md).
template <int Tiles>
__global__ void __launch_bounds__(kWarps * 32) few_rows_gemm_kernel(const FewRowsGemmParams p) {
  __shared__ float partial[kWarps][Tiles][4][32];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const int row0 = blockIdx.x * kRows;
  // Rows past the end read the last row; their sums are not written.
  const char* codes = reinterpret_cast<const char*>(p.fp8.codes);
  const char* lo_row = codes + static_cast<int64_t>(min(row0 + g, p.n - 1)) * p.k + 16 * t;
  const char* hi_row = codes + static_cast<int64_t>(min(row0 + g + 8, p.n - 1)) * p.k + 16 * t;
  const int groups = p.k / kGroupColumns;
  uint4 loaded[kInFlight][2];
#pragma unroll
  for (int u = 0; u < kInFlight; ++u) {
    const int group = warp + u * kWarps;
    if (group < groups) {
      loaded[u][0] = load_streaming(lo_row + kGroupColumns * static_cast<int64_t>(group));
      loaded[u][1] = load_streaming(hi_row + kGroupColumns * static_cast<int64_t>(group));
    }
  }
  // A 16-row block lies in one 128-row block of scales.
  const float* scales = p.fp8.scales + static_cast<int64_t>(row0 / 128) * p.fp8.scale_stride;
  wait_for_prior_grids();
  allow_dependent_grids();

  float acc[Tiles][4] = {};
  for (int first = 0; warp + first * kWarps < groups; first += kInFlight) {
#pragma unroll
    for (int u = 0; u < kInFlight; ++u) {
      const int group = warp + (first + u) * kWarps;
      if (group >= groups) break;
      const int column = group * kGroupColumns + 16 * t;
      uint32_t x_words[Tiles][8];
#pragma unroll
      for (int j = 0; j < Tiles; ++j) {
        const int x_row = 8 * j + g;
        load_x_words(x_row < p.m ? p.x + static_cast<int64_t>(x_row) * p.k : nullptr, column, x_words[j]);
      }
      // A group's products are summed apart and added times the group's block scale.
      float group_sums[Tiles][4];
      group_products<Tiles>(loaded[u][0], loaded[u][1], x_words, group_sums);
      const float scale = __ldg(scales + group * kGroupColumns / 128);
#pragma unroll
      for (int j = 0; j < Tiles; ++j) {
#pragma unroll
        for (int c = 0; c < 4; ++c) acc[j][c] += scale * group_sums[j][c];
      }
      const int ahead = group + kInFlight * kWarps;
      if (ahead < groups) {
        loaded[u][0] = load_streaming(lo_row + kGroupColumns * static_cast<int64_t>(ahead));
        loaded[u][1] = load_streaming(hi_row + kGroupColumns * static_cast<int64_t>(ahead));
      }
    }
  }

  // The warps' sums in warp order, so the result does not depend on timing.
#pragma unroll
  for (int j = 0; j < Tiles; ++j) {
#pragma unroll
    for (int c = 0; c < 4; ++c) partial[warp][j][c][lane] = acc[j][c];
  }
  __syncthreads();
  for (int i = threadIdx.x; i < Tiles * 4 * 32; i += blockDim.x) {
    const int j = i / 128, c = i / 32 % 4, l = i % 32;
    // Accumulator c of lane l: row l / 4 (+ 8 for c >= 2), x row 2 (l % 4) + c % 2 of tile j.
    const int row = row0 + l / 4 + (c >= 2 ? 8 : 0);
    const int x_row = 8 * j + 2 * (l % 4) + c % 2;
    if (row >= p.n || x_row >= p.m) continue;
    float sum = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) sum += partial[w][j][c][l];
    const int64_t at = static_cast<int64_t>(x_row) * p.n + row;
    if (p.f32_out) {
      static_cast<float*>(p.out)[at] = sum + (p.bias ? static_cast<const float*>(p.bias)[row] : 0.0f);
    } else {
      const float bias = p.bias ? __bfloat162float(static_cast<const __nv_bfloat16*>(p.bias)[row]) : 0.0f;
      static_cast<__nv_bfloat16*>(p.out)[at] = __float2bfloat16(sum + bias);
    }
  }
}

}  // namespace

bool few_rows_gemm_supports(int64_t m, int64_t n, int64_t k) {
  return m >= 1 && m <= kMaxRows && n > 0 && n < (int64_t{1} << 31) && k > 0 && k % kGroupColumns == 0 &&
         k < (int64_t{1} << 31);
}

void launch_few_rows_gemm(const FewRowsGemmParams& p, cudaStream_t stream) {
  if (!few_rows_gemm_supports(p.m, p.n, p.k)) {
    throw std::invalid_argument("few_rows_gemm: [" + std::to_string(p.m) + ", " + std::to_string(p.k) + "] x [" +
                                std::to_string(p.n) + ", " + std::to_string(p.k) +
                                "]^T is outside the kernel's shapes (1-16 rows, K a multiple of 64)");
  }
  if (!p.fp8.covers(p.k) || !p.x || !p.out) {
    throw std::invalid_argument("few_rows_gemm: needs x, out and a block-FP8 weight with its scales");
  }
  const unsigned blocks = (p.n + kRows - 1) / kRows;
  if (p.m <= 8) {
    launch_dependent("few_rows_gemm", few_rows_gemm_kernel<1>, blocks, kWarps * 32, 0, stream, p);
  } else {
    launch_dependent("few_rows_gemm", few_rows_gemm_kernel<2>, blocks, kWarps * 32, 0, stream, p);
  }
}

}  // namespace tern::kernels
