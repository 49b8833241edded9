#include <stdexcept>
#include <string>

#include "common/dependent_launch.cuh"
#include "common/device_math.cuh"
#include "linear/few_rows_gemm.h"

namespace tern::kernels {

namespace {

constexpr int kWarps = 8;
constexpr int kRows = 16;          // weight rows a block: the mma's m16
constexpr int kGroupColumns = 64;  // a column group: 16 codes of a row for each of 4 lanes
constexpr int kSteps = 4;          // k16 steps of the mma a group
constexpr int kMaxRows = 16;       // x's rows: two n8 tiles
// Column groups whose loads a lane keeps in flight, in registers. Measured on an H100 (docs/BENCHMARKS.md): 8
// groups, or x's columns loaded a group ahead, or the groups in a ring in shared memory (cp.async, 6-12 groups)
// were all slower: more registers or shared memory a block leave fewer warps an SM.
constexpr int kInFlight = 4;

// Weights are read once: past L1, leaving it to x, which every block rereads. volatile: the loads below are
// guarded (column groups past K), and the compiler may execute a plain asm statement unconditionally (it did so
// in a kernel built on this load, reading past a weight's last row: docs/BENCHMARKS.md, fifty-eighth session).
__device__ __forceinline__ uint4 load_streaming(const void* address) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(address));
  return v;
}

// Codes 1 and 3 of a word (bytes b0-b3, b0 lowest) as the bf16 pair {b1, b3}, each 2^-120 times its value: the
// sign stays in the top bit and exponent and mantissa move down 4 bits into bf16's fields, subnormals included.
__device__ __forceinline__ uint32_t e4m3_odd_codes_scaled_down(uint32_t word) {
  return (word & 0x80008000u) | ((word & 0x7f007f00u) >> 4);
}

// The pair's exact values: bf16 products with a power of two, subnormal inputs included.
__device__ __forceinline__ uint32_t times_2_to_120(uint32_t pair) {
  const __nv_bfloat162 scaled = __hmul2(*reinterpret_cast<const __nv_bfloat162*>(&pair),
                                        __halves2bfloat162(__ushort_as_bfloat16(0x7b80), __ushort_as_bfloat16(0x7b80)));
  return *reinterpret_cast<const uint32_t*>(&scaled);
}

// A lane reads 16 codes of two weight rows (g and g + 8 of its block's 16) per column group; the 4 lanes of a row
// cover the group's 64 columns. Which columns an mma step's fragment slots stand for is ours to choose, as long as
// x's fragment names the same ones: step s takes word s of the lane's 16 codes, whose codes 1 and 3 are the k pair
// {2t, 2t + 1} of the A fragment ({row g, ..}, {row g + 8, ..}) and codes 0 and 2 the pair {2t + 8, 2t + 9}.
__device__ __forceinline__ void weight_fragment(const uint4& lo_row, const uint4& hi_row, int s, uint32_t (&a)[4]) {
  const uint32_t lo[4] = {lo_row.x, lo_row.y, lo_row.z, lo_row.w};
  const uint32_t hi[4] = {hi_row.x, hi_row.y, hi_row.z, hi_row.w};
  a[0] = times_2_to_120(e4m3_odd_codes_scaled_down(lo[s]));
  a[1] = times_2_to_120(e4m3_odd_codes_scaled_down(hi[s]));
  a[2] = times_2_to_120(e4m3_odd_codes_scaled_down(lo[s] << 8));
  a[3] = times_2_to_120(e4m3_odd_codes_scaled_down(hi[s] << 8));
}

// x's fragment for the same step from the lane's 16 columns of one x row (words of bf16 pairs, in column order).
__device__ __forceinline__ void x_fragment(const uint32_t (&words)[8], int s, uint32_t& b0, uint32_t& b1) {
  b0 = __byte_perm(words[2 * s], words[2 * s + 1], 0x7632);  // columns 1 and 3 of the step's 4
  b1 = __byte_perm(words[2 * s], words[2 * s + 1], 0x5410);  // columns 0 and 2
}

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
#pragma unroll
        for (int v = 0; v < 2; ++v) {
          const uint4 chunk = x_row < p.m ? *reinterpret_cast<const uint4*>(p.x + static_cast<int64_t>(x_row) * p.k +
                                                                              column + 8 * v)
                                          : make_uint4(0, 0, 0, 0);
          x_words[j][4 * v] = chunk.x;
          x_words[j][4 * v + 1] = chunk.y;
          x_words[j][4 * v + 2] = chunk.z;
          x_words[j][4 * v + 3] = chunk.w;
        }
      }
      // A group's products are summed apart and added times the group's block scale.
      float group_sums[Tiles][4] = {};
#pragma unroll
      for (int s = 0; s < kSteps; ++s) {
        uint32_t a[4];
        weight_fragment(loaded[u][0], loaded[u][1], s, a);
#pragma unroll
        for (int j = 0; j < Tiles; ++j) {
          uint32_t b0, b1;
          x_fragment(x_words[j], s, b0, b1);
          mma_bf16_16816(group_sums[j], a, b0, b1);
        }
      }
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
