#pragma once
// out [1, N] = x [1, K] * weight [N, K]^T (+ bias [N]) for batch-1 decode, bf16 in and out with float32 sums: a
// warp per weight row keeps every row's loads in flight at once, the block's warps share x from shared memory.
// Measured against cuBLASLt at M = 1 on the 8B decode shapes (bench/linear_bench, docs/BENCHMARKS.md) it was
// faster on each; at M = 4 slower, so it takes one row only.
// At batch 1 a kernel between two GEMVs costs a few microseconds, mostly waiting, so the GEMV can also do the
// block's pre-norm (residual add and RMSNorm) while it loads x. (The gated activation in the gate/up GEMV's epilogue
// was tried too: the down projection right after a GEMV ran slower by more than the activation kernel saved;
// docs/BENCHMARKS.md.)
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace tern::kernels {

struct GemvParams {
  const __nv_bfloat16* x = nullptr;       // [K]
  const __nv_bfloat16* weight = nullptr;  // [N, K]
  const __nv_bfloat16* bias = nullptr;    // [N] or null
  __nv_bfloat16* out = nullptr;           // [N]
  int n = 0;
  int k = 0;
  // Pre-norm, when norm_weight is set: the product's input is rms_norm(x + addend) * norm_weight, where x + addend
  // is rounded to bf16 as the residual stream stores it (addend optional) and written to residual_out when an
  // addend is given.
  const __nv_bfloat16* addend = nullptr;       // [K] or null
  const __nv_bfloat16* norm_weight = nullptr;  // [K] or null
  __nv_bfloat16* residual_out = nullptr;       // [K]; not x (other blocks still read x)
  float eps = 1e-6f;
};

// Whether a shape fits the kernel: M = 1, K a multiple of 8 whose x fits 48 KB of shared memory. Pointers must be
// 16-byte aligned.
bool gemv_supports(int64_t m, int64_t n, int64_t k);

void launch_gemv(const GemvParams& params, cudaStream_t stream);

}  // namespace tern::kernels
