#pragma once
// out [1, N] = x [1, K] * weight [N, K]^T (+ bias [N]) for batch-1 decode, bf16 in and out with float32 sums: a
// warp per weight row keeps every row's loads in flight at once, the block's warps share x from shared memory.
// Measured against cuBLASLt at M = 1 on the 8B decode shapes (bench/linear_bench, docs/BENCHMARKS.md) it was
// faster on each; at M = 4 slower, so it takes one row only.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace tern::kernels {

// Whether a shape fits the kernel: M = 1, K a multiple of 8 whose x fits 48 KB of shared memory. Pointers must be
// 16-byte aligned.
bool gemv_supports(int64_t m, int64_t n, int64_t k);

void launch_gemv(const __nv_bfloat16* x, const __nv_bfloat16* weight, const __nv_bfloat16* bias,
                 __nv_bfloat16* out, int m, int n, int k, cudaStream_t stream);

}  // namespace tern::kernels
