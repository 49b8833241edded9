#pragma once
// Block-FP8 GEMM on Hopper's FP8 tensor cores (wgmma, e4m3 x e4m3, float32 accumulation), DeepSeek-V3's W8A8
// "dynamic" scheme: activations quantized per row and 128 columns (kernels/linear/block_fp8.h), weights in 128x128
// blocks, each 128-deep slice of the product scaled by its row's and block's scales as it is added up (DeepGEMM's
// promotion of the tensor cores' partial sums into float32 accumulators). cuBLASLt 13.1 has no block-scaled FP8
// GEMM on sm_90 (docs/BENCHMARKS.md), hence this kernel.
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "linear/block_fp8.h"

namespace tern::kernels {

struct Fp8GemmParams {
  // x's e4m3 codes [m, k] (rows k bytes apart) with float32 scales per row and 128 columns: the scale of row r and
  // column block b at x_scales[b * x_scale_stride + r] (launch_quantize_rows_fp8's layout, x_scale_stride its
  // m; a group's own layout for launch_quantize_row_groups_fp8's groups).
  const __nv_fp8_e4m3* x = nullptr;
  const float* x_scales = nullptr;
  int64_t x_scale_stride = 0;
  BlockFp8Codes weight;         // [n, k]
  const void* bias = nullptr;   // [n], out's type, or null
  void* out = nullptr;          // [m, n], bf16 or float32
  bool f32_out = false;
  int m = 0, n = 0, k = 0;      // k a multiple of 16
};

// out = x times weight transposed (+ bias).
void launch_fp8_gemm(const Fp8GemmParams& p, cudaStream_t stream);

}  // namespace tern::kernels
