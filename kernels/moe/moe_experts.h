#pragma once
// The routed experts of a mixture-of-experts layer, without a host sync (so that decode steps can be recorded as
// CUDA graphs): the (token, slot) pairs are grouped by expert on the device, each expert's rows padded to whole
// tiles (the layout of vLLM's moe_align_block_size), and two grouped GEMMs run over a grid sized for the worst
// case, whose unused tiles return at once.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "elementwise/gated_activation.h"
#include "linear/block_fp8.h"

namespace tern::kernels {

// Rows of a grouped-GEMM tile: each expert's rows are padded to a multiple of this.
constexpr int kMoeTileRows = 64;

// Tiles and rows the grouping of `num_pairs` (token, slot) pairs over `num_experts` experts can need at most.
int64_t moe_max_tiles(int64_t num_pairs, int64_t num_experts);

struct MoeGrouping {
  int32_t* pair_row = nullptr;     // [num_pairs]: the padded row of each pair, -1 when its expert is not local
  int32_t* row_pair = nullptr;     // [max_tiles * kMoeTileRows]: the pair of each row, -1 for padding
  int32_t* tile_expert = nullptr;  // [max_tiles]: the local expert of each tile, -1 past the last
  int32_t* expert_rows = nullptr;  // [num_experts + 1]: where each expert's (padded) rows start, then the end
};

// Groups pairs (expert_ids [num_pairs]) whose expert lies in [first_expert, first_expert + num_experts).
void launch_moe_group_pairs(const int32_t* expert_ids, int64_t num_pairs, int first_expert, int num_experts,
                            int64_t max_tiles, const MoeGrouping& grouping, cudaStream_t stream);

// MXFP4 experts as the kernels read them (backend/mxfp4_layout.h; gpt-oss's and DeepSeek-V4's FP4 experts): e2m1
// codes two to a byte, element 2i in the low nibble of byte i, rows of k / 2 bytes, and an e8m0 scale byte per row
// and 32 columns, rows of k / 32; element (r, c) is its code times 2^(scales[r][c / 32] - 127).
struct Mxfp4Codes {
  const uint8_t* codes = nullptr;
  const uint8_t* scales = nullptr;
};

// Rows of 128x128 scale blocks an [n, k] block-FP8 expert has (MoeGemmParams::fp8).
__host__ __device__ constexpr int64_t expert_scale_rows(int64_t n) { return (n + 127) / 128; }

struct MoeGemmParams {
  // Row r of the input: rows[r] of `input` when gather_by_pair (input row = row_pair[r] / top_k, the token of the
  // pair; padding rows read zeros), else row r itself.
  const __nv_bfloat16* input = nullptr;
  const int32_t* row_pair = nullptr;
  bool gather_by_pair = false;
  int top_k = 1;
  const int32_t* tile_expert = nullptr;
  int64_t max_tiles = 0;
  const __nv_bfloat16* weight = nullptr;  // [experts, n, k], or null for quantized experts
  // Quantized experts instead, one of (each weight its code times its scale; the few-rows GEMM and the MXFP4 tiles
  // multiply bf16 activations, W8A16 and W4A16):
  // - block FP8: codes [experts, n, k], each expert's [n, k] in 128x128 blocks of its own (edge blocks partial,
  //   as an expert's checkpoint tensor has them), the experts' scale grids one after the other: expert e's block
  //   (r / 128, c / 128) at scales[(e * expert_scale_rows(n) + r / 128) * scale_stride + c / 128]; k a multiple of
  //   16. Where n is a multiple of 128 that is the grid of the [experts * n, k] rows;
  // - MXFP4: the [experts * n, k] rows' codes and scales; k a multiple of 32.
  BlockFp8Codes fp8;
  Mxfp4Codes mxfp4;
  const __nv_bfloat16* bias = nullptr;    // [experts, n] or null
  __nv_bfloat16* out = nullptr;           // [max_tiles * kMoeTileRows, n]
  int n = 0;
  int k = 0;  // a multiple of 8
  // Experts get a few rows each (decode): one warp per output column reads its weight row once for all of a
  // tile's rows instead of a tensor-core tile (then padding rows are left unwritten; nothing reads them). Over
  // grouped tiles, bf16 experts with K a multiple of 32 and block-FP8 ones with K a multiple of 64 take
  // moe_few_rows_mma.h's kernels instead, 16 weight rows a block on mma.sync.
  bool few_rows = false;
  // few_rows only: a gate/up projection (n = 2 * width, the gate columns first) whose out is the gated activation
  // [max_tiles * kMoeTileRows, width] instead: the warp of column c computes gate c and up c + width of its rows,
  // so the activation needs no kernel and gate/up no round trip through memory.
  bool fuse_gated_activation = false;
  GatedActivationSpec activation;
  // Pair tiles (few_rows; one token's experts, batch-1 decode): with pair_expert (the routing's expert ids [pairs],
  // local experts [first_expert, first_expert + num_experts)) tile t is pair t alone and out row t its row: no
  // grouping launch, and since a token's slots name distinct experts no weight is read twice. max_tiles is then the
  // pairs. With pair_weights ([pairs], the routing weights) too, a down projection sums each token's slots weighted
  // as launch_moe_combine would (tile t is token t, max_tiles the tokens, out [tokens, n]): no combine launch.
  const int32_t* pair_expert = nullptr;
  int first_expert = 0;
  const float* pair_weights = nullptr;
  // bf16 and block-FP8 experts over tiles (not few_rows) run the grouped TMA GEMMs (linear/bf16_gemm.h; block FP8
  // as W8A8, linear/fp8_gemm.h) on the experts' rows side by side: expert_rows and num_experts are
  // MoeGrouping::expert_rows and its experts, routed_rows the pairs (the tiles' height follows their mean an
  // expert; 0: every row), and with gather_by_pair the input rows are gathered first into `gathered`
  // ([max_tiles * kMoeTileRows, k]). Block FP8 quantizes the rows into row_codes ([max_tiles * kMoeTileRows, k])
  // and row_scales ([max_tiles * kMoeTileRows * ceil(k / 128)]).
  const int32_t* expert_rows = nullptr;
  int num_experts = 0;
  int64_t routed_rows = 0;
  __nv_bfloat16* gathered = nullptr;
  __nv_fp8_e4m3* row_codes = nullptr;
  float* row_scales = nullptr;
};

// Whether `num_pairs` pairs over `num_experts` experts are few rows per expert (MoeGemmParams::few_rows).
bool moe_few_rows(int64_t num_pairs, int64_t num_experts);

// out[r] = input row of r times weight[tile_expert[r / kMoeTileRows]]^T (+ bias).
void launch_moe_grouped_gemm(const MoeGemmParams& params, cudaStream_t stream);

// out[r] = the gated activation of gate_up[r] ([max_tiles * kMoeTileRows, 2 * width] -> [.., width]) for the rows
// that hold a pair. A block takes one tile's rows (and up to 512 columns): blocks of unused tiles return after one
// read, the others cover their tile's real rows only, so a grid sized for the worst case (graphs) costs what the
// pairs need. Padding rows of out are left unwritten (the down GEMM's outputs for them are never combined).
void launch_moe_gated_activation(const __nv_bfloat16* gate_up, __nv_bfloat16* out, const MoeGrouping& grouping,
                                 int64_t max_tiles, int width, const GatedActivationSpec& spec, cudaStream_t stream);

// out[t] = sum over slots j of weights[t, j] * rows[pair_row[t * top_k + j]] (pairs without a row add nothing).
void launch_moe_combine(const __nv_bfloat16* rows, const int32_t* pair_row, const float* weights,
                        __nv_bfloat16* out, int64_t num_tokens, int top_k, int hidden, cudaStream_t stream);

}  // namespace tern::kernels
