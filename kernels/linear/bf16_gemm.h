#pragma once
// bf16 GEMM on Hopper's tensor cores with TMA and wgmma (linear/wgmma_gemm_kernel.cuh, the structure of the
// block-FP8 GEMM), for what cuBLASLt has no single call for on sm_90 without a host sync: every MoE expert's rows
// times its weight in one launch (grouped), with the rows' grouping on the device, so that prefill steps need no
// GEMM per expert and decode steps recorded as CUDA graphs run the same kernel. Dense products of one weight go to
// cuBLASLt (src/backend/cuda/gemm.h).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace tern::kernels {

struct Bf16GemmParams {
  const __nv_bfloat16* x = nullptr;       // [m, k]
  const __nv_bfloat16* weight = nullptr;  // [n, k]; grouped: [num_groups, n, k]
  const void* bias = nullptr;             // [n] ([num_groups, n] grouped), out's type, or null
  void* out = nullptr;                    // [m, n], bf16 or float32
  bool f32_out = false;
  int m = 0, n = 0, k = 0;                // k a multiple of 8 (TMA rows are 16-byte multiples)

  // A grouped product where group_rows is set: group g's rows of x are [group_rows[g], group_rows[g + 1])
  // (device memory, [num_groups + 1], up to 4,096 groups), multiplied by weight g plus bias g. Rows of x past the
  // last group are neither read into an output nor written.
  const int32_t* group_rows = nullptr;
  int num_groups = 0;
  // The rows the groups hold, where x is sized for more (a CUDA graph's worst case): tiles are 64 or 128 rows by
  // the mean of a group's, so few rows a group take 64-row tiles. 0: m.
  int routed_rows = 0;
};

// out = x times weight transposed (+ bias).
void launch_bf16_gemm(const Bf16GemmParams& p, cudaStream_t stream);

}  // namespace tern::kernels
