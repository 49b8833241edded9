#include <stdexcept>
#include <string>

#include "attention/smem_swizzle.h"
#include "common/dependent_launch.cuh"
#include "common/device_math.cuh"
#include "common/wgmma.cuh"
#include "linear/fp8_gemm.h"

namespace tern::kernels {

namespace {

// A 128 x 128 output tile per block of two warpgroups, each 64 rows x 128 columns. K runs in slices of 128 (one
// scale block): x's and the weight's 128 x 128 code tiles of a slice (16 KB each, one 128-byte swizzled row per
// row, smem_swizzle.h's layout with e4m3 codes for bf16 pairs) arrive through cp.async, kStages slices in flight.
// Per slice each warpgroup issues four m64n128k32 wgmmas into a fresh partial sum, waits for them, and adds the
// partial sum times the row's x scale times the block's weight scale into its float32 accumulators.
constexpr int kTile = 128;
constexpr int kThreads = 256;
constexpr int kStages = 4;
constexpr int kTileBytes = kTile * kTile;           // e4m3 codes
constexpr int kStageBytes = 2 * kTileBytes;         // x's tile, then the weight's
constexpr int kSmemBytes = kStages * kStageBytes;   // 128 KB
constexpr int kChunksPerThread = kTileBytes / 16 / kThreads;  // 16-byte chunks of each tile per thread

__global__ void __launch_bounds__(kThreads) fp8_gemm_kernel(Fp8GemmParams p) {
  extern __shared__ __align__(1024) uint8_t smem[];
  wait_for_prior_grids();
  allow_dependent_grids();
  const int n0 = blockIdx.x * kTile;
  const int m0 = blockIdx.y * kTile;
  const int slices = (p.k + kTile - 1) / kTile;
  const auto* x = reinterpret_cast<const uint8_t*>(p.x);
  const auto* w = reinterpret_cast<const uint8_t*>(p.weight.codes);

  const auto load_slice = [&](int slice) {
    if (slice < slices) {
      uint8_t* stage = smem + (slice % kStages) * kStageBytes;
#pragma unroll
      for (int i = 0; i < kChunksPerThread; ++i) {
        const int chunk = threadIdx.x + kThreads * i;
        const int row = chunk / 8, c = chunk % 8;
        const int column = slice * kTile + 16 * c;
        const uint32_t offset = swizzle128::chunk_offset(kTile, row, c);
        const bool x_valid = m0 + row < p.m && column < p.k;
        const bool w_valid = n0 + row < p.n && column < p.k;
        cp_async_16(stage + offset, x_valid ? x + static_cast<int64_t>(m0 + row) * p.k + column : x,
                    x_valid ? 16 : 0);
        cp_async_16(stage + kTileBytes + offset, w_valid ? w + static_cast<int64_t>(n0 + row) * p.k + column : w,
                    w_valid ? 16 : 0);
      }
    }
    cp_async_commit();  // empty groups too, so that every iteration waits for the same count
  };

  const int warpgroup = threadIdx.x / 128;
  const int warp = (threadIdx.x % 128) / 32;
  const int lane = threadIdx.x % 32;
  // This thread's accumulator rows (wgmma.cuh's fragment layout): r and r + 8.
  const int row = m0 + 64 * warpgroup + 16 * warp + lane / 4;
  float acc[64] = {};
  float partial[64];

  for (int s = 0; s < kStages - 1; ++s) load_slice(s);
  const uint32_t smem_base = smem_address(smem);
  for (int slice = 0; slice < slices; ++slice) {
    cp_async_wait<kStages - 2>();
    fence_proxy_async_shared();  // the copies' generic-proxy writes before the wgmmas' async-proxy reads
    __syncthreads();             // slice landed for every thread; the stage read last iteration is free
    load_slice(slice + kStages - 1);
    const uint32_t x_tile = smem_base + (slice % kStages) * kStageBytes;
    const uint32_t w_tile = x_tile + kTileBytes;
    wgmma_fence();
#pragma unroll
    for (int step = 0; step < kTile / 32; ++step) {
      wgmma_m64n128k32_e4m3_ss(partial, swizzle128::k_major_descriptor(x_tile, kTile, 64 * warpgroup, step),
                               swizzle128::k_major_descriptor(w_tile, kTile, 0, step), step > 0);
    }
    wgmma_commit();
    wgmma_wait<0>();
    wgmma_fence_operands(partial);
    const float w_scale = p.weight.scales[(n0 / kTile) * p.weight.scale_stride + slice];
    const float* x_scales = p.x_scales + static_cast<int64_t>(slice) * p.x_scale_stride;
    const float scale_lo = row < p.m ? x_scales[row] * w_scale : 0.0f;
    const float scale_hi = row + 8 < p.m ? x_scales[row + 8] * w_scale : 0.0f;
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      acc[4 * j] += partial[4 * j] * scale_lo;
      acc[4 * j + 1] += partial[4 * j + 1] * scale_lo;
      acc[4 * j + 2] += partial[4 * j + 2] * scale_hi;
      acc[4 * j + 3] += partial[4 * j + 3] * scale_hi;
    }
  }
  cp_async_wait<0>();

#pragma unroll
  for (int j = 0; j < 16; ++j) {
    const int column = n0 + 8 * j + 2 * (lane % 4);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = row + 8 * h;
      if (r >= p.m) continue;
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int c = column + e;
        if (c >= p.n) continue;
        float v = acc[4 * j + 2 * h + e];
        if (p.f32_out) {
          if (p.bias) v += static_cast<const float*>(p.bias)[c];
          static_cast<float*>(p.out)[static_cast<int64_t>(r) * p.n + c] = v;
        } else {
          if (p.bias) v += __bfloat162float(static_cast<const __nv_bfloat16*>(p.bias)[c]);
          static_cast<__nv_bfloat16*>(p.out)[static_cast<int64_t>(r) * p.n + c] = __float2bfloat16(v);
        }
      }
    }
  }
}

}  // namespace

void launch_fp8_gemm(const Fp8GemmParams& p, cudaStream_t stream) {
  if (p.m < 0 || p.n < 0 || p.k <= 0 || p.k % 16 != 0 || !p.weight.covers(p.k) || !p.x || !p.x_scales ||
      p.x_scale_stride < p.m) {
    throw std::invalid_argument("fp8_gemm: [" + std::to_string(p.m) + ", " + std::to_string(p.k) + "] x [" +
                                std::to_string(p.n) + ", " + std::to_string(p.k) +
                                "]^T (k a positive multiple of 16, with every scale)");
  }
  if (p.m == 0 || p.n == 0) return;
  if ((p.m + kTile - 1) / kTile > 65535) throw std::invalid_argument("fp8_gemm: too many rows for one launch");
  static const bool attributes_set = [] {
    const cudaError_t err =
        cudaFuncSetAttribute(fp8_gemm_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes);
    if (err != cudaSuccess) throw std::runtime_error(std::string("fp8_gemm: ") + cudaGetErrorString(err));
    return true;
  }();
  (void)attributes_set;
  const dim3 grid(static_cast<unsigned>((p.n + kTile - 1) / kTile), static_cast<unsigned>((p.m + kTile - 1) / kTile));
  launch_dependent("fp8_gemm", fp8_gemm_kernel, grid, kThreads, kSmemBytes, stream, p);
}

}  // namespace tern::kernels
