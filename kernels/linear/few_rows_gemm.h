#pragma once
// out [m, N] = x [m, K] (bf16) times a block-FP8 weight [N, K]^T (+ bias) for decode batches of 1-16 rows, W8A16:
// x multiplied as it is. At these rows a linear is bound by reading its weight once, and the FP8 tensor-core GEMM's
// path (activation quantization, split-K product, the sum of the splits: three launches) reached 37-78% of the
// copy rate on the 8B decode shapes, this kernel 63-90% (an H100, docs/BENCHMARKS.md). A block takes 16 weight rows
// over the whole of K, its warps K's 64-column groups in turn, each lane keeping 16-byte loads of two rows in flight;
// the weight rows are the m16 side of mma.sync m16n8k16 and x's rows the n8 side (two n8 tiles above 8 rows), so
// the arithmetic is one tensor-core instruction per 256 codes, and the warps' partial sums meet in shared memory.
// An e4m3 code becomes a bf16 value exactly by moving its bits (the sign, and exponent and mantissa shifted into
// bf16's fields) and one multiplication by 2^120 for the exponents' bias difference, which subnormal codes need as
// well (the conversion of vLLM's Marlin kernels, csrc/quantization/marlin/dequant.h: bit moves, then one multiply);
// each group's products are summed in float32 and scaled by their 128x128 block's scale.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "linear/block_fp8.h"

namespace tern::kernels {

struct FewRowsGemmParams {
  const __nv_bfloat16* x = nullptr;  // [m, k], rows k apart
  BlockFp8Codes fp8;                 // [n, k]
  const void* bias = nullptr;        // [n], out's type, or null
  void* out = nullptr;               // [m, n], bf16 or float32
  bool f32_out = false;
  int m = 0, n = 0, k = 0;
};

// 1 <= m <= 16 and K a multiple of 64 (whole column groups). Pointers 16-byte aligned.
bool few_rows_gemm_supports(int64_t m, int64_t n, int64_t k);

// Throws std::invalid_argument on shapes the kernel does not take.
void launch_few_rows_gemm(const FewRowsGemmParams& params, cudaStream_t stream);

}  // namespace tern::kernels
