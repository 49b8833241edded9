#pragma once
// Block-FP8 experts with few rows each (decode, MoeGemmParams::few_rows) on tensor cores, W8A16: the warp per output
// column (moe_experts.cu) converts every code to float32 and is bound by its instructions, so FP8 experts decoded no
// faster than bf16 ones (docs/BENCHMARKS.md). Here a block takes 16 weight rows of its tile's expert over the whole
// of K, its 8 warps K's 64-column groups in turn, and multiplies them with up to 8 of the tile's rows at a time on
// mma.sync m16n8k16 (linear/fp8_mma_fragments.cuh), each row's block scale applied to its group's float32 sums;
// the warps' sums meet in shared memory in warp order. The three few-rows products keep their outputs and
// roundings: plain; gate/up with the gated activation (a block's rows are 8 gate rows and their 8 up rows); and the
// down projection summing a token's slots under pair tiles (each slot's product rounded to bf16 with its bias, then
// added weighted in slot order).
#include <cuda_runtime.h>

#include "moe/moe_experts.h"

namespace tern::kernels {

// Whether launch_moe_few_rows_mma takes these few-rows products: bf16 experts with K a multiple of 32, block-FP8
// ones with K a multiple of 64.
bool moe_few_rows_mma_supports(const MoeGemmParams& p);

void launch_moe_few_rows_mma(const MoeGemmParams& p, cudaStream_t stream);

}  // namespace tern::kernels
