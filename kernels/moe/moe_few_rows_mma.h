#pragma once
// bf16 and block-FP8 experts with few rows each (decode, MoeGemmParams::few_rows) on tensor cores, the weights read
// once at close to the copy rate. A block takes 16 weight rows of its tile's expert over the whole of K, its 8
// warps K's column groups in turn (64 columns of FP8 codes or 32 bf16 values: 16 bytes of each of two rows a lane,
// four groups' loads in flight), and multiplies them with up to 8 of the tile's rows at a time on mma.sync
// m16n8k16 (linear/weight_mma_fragments.cuh: FP8 codes become exact bf16 values in registers, W8A16, each row's block
// scale applied to its group's float32 sums; bf16 rows are the fragments as loaded). The warps' sums meet in
// shared memory in warp order. The three few-rows products keep their outputs and roundings: plain; gate/up with
// the gated activation (a block's rows are 8 gate rows and their 8 up rows); and the down projection summing a
// token's slots under pair tiles (each slot's product rounded to bf16 with its bias, then added weighted in slot
// order), so one token's pair tiles give its row of a batch bit for bit. It replaced the warp per output column
// (moe_experts.cu), which converts every weight to float32 and was bound by its instructions: FP8 experts decoded
// no faster than bf16 ones, and Qwen3-30B-A3B's short rows (K of 2,048 and 768) left both short of the copy rate.
#include <cuda_runtime.h>

#include "moe/moe_experts.h"

namespace tern::kernels {

// Whether launch_moe_few_rows_mma takes these few-rows products: bf16 experts with K a multiple of 32, block-FP8
// ones with K a multiple of 64.
bool moe_few_rows_mma_supports(const MoeGemmParams& p);

void launch_moe_few_rows_mma(const MoeGemmParams& p, cudaStream_t stream);

}  // namespace tern::kernels
