#pragma once
// bf16 and block-FP8 experts with few rows each over grouped tiles (decode batches, MoeGemmParams::few_rows) on
// tensor cores. A block takes 16 weight rows of its tile's expert over the whole of K, its 8 warps K's column groups
// in turn (64 columns of FP8 codes or 32 bf16 values: 16 bytes of each of two rows a lane, four groups' loads in
// flight), and multiplies them with up to 8 of the tile's rows at a time on mma.sync m16n8k16
// (linear/weight_mma_fragments.cuh: FP8 codes become exact bf16 values in registers, W8A16, each row's block scale
// applied to its group's float32 sums; bf16 rows are the fragments as loaded). The warps' sums meet in shared memory
// in warp order. Outputs and roundings are the warp per output column's (moe_experts.cu): plain, or gate/up with
// the gated activation (a block's rows are 8 gate rows and their 8 up rows, each rounded to bf16 before the
// activation). The warp per column converts every weight to float32 and is bound by its instructions: at 16
// tokens it ran FP8 experts no faster than bf16 ones. One token's pair tiles (batch 1) stay on it: there these
// kernels measured 4-24% slower (docs/BENCHMARKS.md).
#include <cuda_runtime.h>

#include "moe/moe_experts.h"

namespace tern::kernels {

// Whether launch_moe_few_rows_mma takes these few-rows products: grouped tiles (no pair tiles) of bf16 experts with K
// a multiple of 32 or block-FP8 ones with K a multiple of 64.
bool moe_few_rows_mma_supports(const MoeGemmParams& p);

void launch_moe_few_rows_mma(const MoeGemmParams& p, cudaStream_t stream);

}  // namespace tern::kernels
