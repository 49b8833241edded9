#pragma once
// Weights streamed through mma.sync m16n8k16 as its A side, x's rows as its B side: what the few-rows GEMM
// (linear/few_rows_gemm, block FP8) and the MoE experts' few-rows products (moe/moe_few_rows_mma, block FP8 and
// bf16) share. Block FP8 (W8A16): a lane (g = lane / 4, t = lane % 4) reads 16
// codes of two weight rows (g and g + 8 of a 16-row slab) per 64-column group, the 4 lanes of a row covering the
// group; the rows are the mma's m16 side and x's rows its n8 side. Which columns an mma step's fragment slots stand
// for is ours to choose, as long as x's fragment names the same ones: step s of a group takes word s of the lane's
// 16 codes, whose codes 1 and 3 are the k pair {2t, 2t + 1} of the A fragment and codes 0 and 2 the pair
// {2t + 8, 2t + 9}. An e4m3 code becomes a bf16 value exactly by moving its bits (the sign, and exponent and
// mantissa shifted into bf16's fields) and one multiplication by 2^120 for the exponents' bias difference, which
// subnormal codes need as well (the conversion of vLLM's Marlin kernels, csrc/quantization/marlin/dequant.h: bit
// moves, then one multiply).
#include <cuda_bf16.h>

#include <cstdint>

#include "common/device_math.cuh"

namespace tern::kernels {

// Weights, FP8 or bf16, are read once: past L1, leaving it to x, which every block rereads. volatile: callers guard
// these loads (groups past K, rows past the weight's), and the compiler may execute a plain asm statement
// unconditionally, as it did with the MoE kernels' first groups (out-of-bounds reads at the last expert's last rows).
__device__ __forceinline__ uint4 load_streaming(const void* address) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(address));
  return v;
}

}  // namespace tern::kernels

namespace tern::kernels::fp8_mma {

constexpr int kGroupColumns = 64;  // a column group: 16 codes of a row for each of 4 lanes
constexpr int kSteps = 4;          // k16 steps of the mma a group

// Codes 1 and 3 of a word (bytes b0-b3, b0 lowest) as the bf16 pair {b1, b3}, each 2^-120 times its value: the
// sign stays in the top bit and exponent and mantissa move down 4 bits into bf16's fields, subnormals included.
__device__ __forceinline__ uint32_t odd_codes_scaled_down(uint32_t word) {
  return (word & 0x80008000u) | ((word & 0x7f007f00u) >> 4);
}

// The pair's exact values: bf16 products with a power of two, subnormal inputs included.
__device__ __forceinline__ uint32_t times_2_to_120(uint32_t pair) {
  const __nv_bfloat162 scaled = __hmul2(*reinterpret_cast<const __nv_bfloat162*>(&pair),
                                        __halves2bfloat162(__ushort_as_bfloat16(0x7b80), __ushort_as_bfloat16(0x7b80)));
  return *reinterpret_cast<const uint32_t*>(&scaled);
}

// Step s's A fragment ({row g, k 2t..}, {row g + 8, ..}, {row g, k 2t + 8..}, {row g + 8, ..}) from the lane's 16
// codes of rows g (lo_row) and g + 8 (hi_row).
__device__ __forceinline__ void weight_fragment(const uint4& lo_row, const uint4& hi_row, int s, uint32_t (&a)[4]) {
  const uint32_t lo[4] = {lo_row.x, lo_row.y, lo_row.z, lo_row.w};
  const uint32_t hi[4] = {hi_row.x, hi_row.y, hi_row.z, hi_row.w};
  a[0] = times_2_to_120(odd_codes_scaled_down(lo[s]));
  a[1] = times_2_to_120(odd_codes_scaled_down(hi[s]));
  a[2] = times_2_to_120(odd_codes_scaled_down(lo[s] << 8));
  a[3] = times_2_to_120(odd_codes_scaled_down(hi[s] << 8));
}

// The lane's 16 columns of a group (from `column`) of one x row as words of bf16 pairs in column order, zeros for
// a null row.
__device__ __forceinline__ void load_x_words(const __nv_bfloat16* row, int column, uint32_t (&words)[8]) {
#pragma unroll
  for (int v = 0; v < 2; ++v) {
    const uint4 chunk = row ? *reinterpret_cast<const uint4*>(row + column + 8 * v) : make_uint4(0, 0, 0, 0);
    words[4 * v] = chunk.x;
    words[4 * v + 1] = chunk.y;
    words[4 * v + 2] = chunk.z;
    words[4 * v + 3] = chunk.w;
  }
}

// Step s's B fragment from those words: columns 1 and 3 of the step's 4, then 0 and 2.
__device__ __forceinline__ void x_fragment(const uint32_t (&words)[8], int s, uint32_t& b0, uint32_t& b1) {
  b0 = __byte_perm(words[2 * s], words[2 * s + 1], 0x7632);
  b1 = __byte_perm(words[2 * s], words[2 * s + 1], 0x5410);
}

// One group's products for Tiles n8 tiles of x's rows: sums[j][c] = the mma's accumulators of the group alone
// (rows g, g + 8; tile j's x columns 2t, 2t + 1), each step's weights converted once for every tile.
template <int Tiles>
__device__ __forceinline__ void group_products(const uint4& lo_row, const uint4& hi_row,
                                               const uint32_t (&x)[Tiles][8], float (&sums)[Tiles][4]) {
#pragma unroll
  for (int j = 0; j < Tiles; ++j) {
#pragma unroll
    for (int c = 0; c < 4; ++c) sums[j][c] = 0.0f;
  }
#pragma unroll
  for (int s = 0; s < kSteps; ++s) {
    uint32_t a[4];
    weight_fragment(lo_row, hi_row, s, a);
#pragma unroll
    for (int j = 0; j < Tiles; ++j) {
      uint32_t b0, b1;
      x_fragment(x[j], s, b0, b1);
      mma_bf16_16816(sums[j], a, b0, b1);
    }
  }
}

}  // namespace tern::kernels::fp8_mma

// bf16 weights through the same mma (the MoE experts' few-rows products): a 32-column group is 8 values of rows g
// and g + 8 a lane (16 bytes, as an FP8 group's codes), the 4 lanes of a row covering it. Step s takes words 2s and
// 2s + 1 of the lane's 4 as the A fragment's k pairs {2t, 2t + 1} and {2t + 8, 2t + 9}, and x's fragment the same
// words of the lane's 8 x columns: no conversion and no permutation.
namespace tern::kernels::bf16_mma {

constexpr int kGroupColumns = 32;
constexpr int kSteps = 2;

// The lane's 8 columns of a group (from `column`) of one x row, zeros for a null row.
__device__ __forceinline__ uint4 load_x(const __nv_bfloat16* row, int column) {
  return row ? *reinterpret_cast<const uint4*>(row + column) : make_uint4(0, 0, 0, 0);
}

// One group's products with one n8 tile of x's rows: sums as the mma's accumulators (rows g, g + 8; x columns 2t,
// 2t + 1).
__device__ __forceinline__ void group_products(const uint4& lo_row, const uint4& hi_row, const uint4& x,
                                               float (&sums)[4]) {
  const uint32_t lo[4] = {lo_row.x, lo_row.y, lo_row.z, lo_row.w};
  const uint32_t hi[4] = {hi_row.x, hi_row.y, hi_row.z, hi_row.w};
  const uint32_t xw[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
  for (int c = 0; c < 4; ++c) sums[c] = 0.0f;
#pragma unroll
  for (int s = 0; s < kSteps; ++s) {
    const uint32_t a[4] = {lo[2 * s], hi[2 * s], lo[2 * s + 1], hi[2 * s + 1]};
    mma_bf16_16816(sums, a, xw[2 * s], xw[2 * s + 1]);
  }
}

}  // namespace tern::kernels::bf16_mma
