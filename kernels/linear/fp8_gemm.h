#pragma once
// Block-FP8 GEMM on Hopper's FP8 tensor cores (wgmma, e4m3 x e4m3, float32 accumulation), DeepSeek-V3's W8A8
// "dynamic" scheme: activations quantized per row and 128 columns (kernels/linear/block_fp8.h), weights in 128x128
// blocks, each 128-deep slice of the product scaled by its row's and block's scales as it is added up (DeepGEMM's
// promotion of the tensor cores' partial sums into float32 accumulators; linear/wgmma_gemm_kernel.cuh). cuBLASLt
// 13.1 has no block-scaled FP8 GEMM on sm_90 (docs/BENCHMARKS.md), hence this kernel.
// Few rows (decode batches) leave most SMs without an output tile, so there the K slices are shared out among
// blocks (split-K) whose float32 partial products a second kernel adds up: the products read the weight at the
// copy rate only with every SM streaming a part of it.
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
  // fp8_gemm_workspace_floats(m, n, k) floats for split-K, or null to compute each output tile in one block.
  float* split_workspace = nullptr;

  // A grouped product (MoE experts) in one launch, where group_rows is set: group g's rows of x are
  // [group_rows[g], group_rows[g + 1]) (device memory, [num_groups + 1], the last m), multiplied by weight g
  // ([n, k] at weight.codes + g * n * k, its scales group_weight_scales floats after group g - 1's) plus bias g
  // (bias + g * n). x's scales are each group's own [ceil(k / 128), its rows] after the groups' before it
  // (launch_quantize_row_groups_fp8's layout; x_scale_stride is not read). Never split; up to 4,096 groups.
  const int32_t* group_rows = nullptr;
  int num_groups = 0;
  int64_t group_weight_scales = 0;
  // The rows the groups hold, where x is sized for more (a CUDA graph's worst case): tiles are 64 or 128 rows by
  // the mean of a group's. 0: m.
  int routed_rows = 0;
};

// The workspace launch_fp8_gemm splits K with for this shape on the current device: 0 when it does not split.
int64_t fp8_gemm_workspace_floats(int m, int n, int k);

// out = x times weight transposed (+ bias).
void launch_fp8_gemm(const Fp8GemmParams& p, cudaStream_t stream);

}  // namespace tern::kernels
