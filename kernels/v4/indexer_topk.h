#pragma once
// DeepSeek-V4's Lightning Indexer top-k over the compressed entries of the paged cache (layout in
// src/backend/compressed_kv.h): per token, score(e) = sum_h relu(q_h . k_e) * softmax_scale * w_h * weights_scale
// in float32 arithmetic (up to summation order) for every closed window e < (position + 1) / compress_rate, and
// the top_k entries by that score, best first, equal scores to the lower entry, -1 past the closed windows.
//
// Two kernels. Scoring spreads a token's entries over num_splits blocks (grid tokens x splits); each block holds the
// token's query in shared memory and scores tiles of 128 entries on tensor cores (bf16 products of the query with
// each key split exactly into three bf16 parts: float32 accuracy; a warp per 16 entries against all heads) into the
// token's row of a workspace. Then an exact radix select per row (elementwise/row_topk.h). The grids depend on the
// step's tokens only, and the workspace on the tokens and the longest context it must hold, so a recorded CUDA
// graph replays at any length up to the one it was sized for.
#include <cstdint>

#include "elementwise/row_topk.h"
#include "v4/compressed_kv.h"

namespace tern::kernels {

struct SelectCompressedParams {
  const __nv_bfloat16* query = nullptr;         // [num_tokens, num_heads, head_dim], rotated
  const __nv_bfloat16* head_weights = nullptr;  // [num_tokens, num_heads]
  const float* states = nullptr;                // [num_slots, state_dim]
  int state_dim = 0;
  int entry_offset = 0;  // the indexer's entries in a state row
  int num_heads = 0;
  int head_dim = 0;
  int compress_rate = 0;
  int top_k = 0;
  float softmax_scale = 1.0f;
  float weights_scale = 1.0f;
  int32_t* selected = nullptr;  // [num_tokens, top_k]: best first, -1 past the closed windows
  V4Tokens tokens;
  int num_splits = 1;  // scoring blocks per token (indexer_topk_splits)
  // Workspace: score_rows rows of score_stride floats, at least every token's closed windows; steps of more tokens
  // run score_rows at a time.
  float* scores = nullptr;
  int score_stride = 0;
  int score_rows = 0;
  int32_t* row_lengths = nullptr;  // [score_rows]
};

constexpr int kMaxIndexerTopK = kMaxRowTopK;  // the selection's bound
constexpr int kMaxIndexerSplits = 256;

// Splits per token for a step of num_tokens: about two scoring blocks per SM in all, one split once the tokens
// alone fill the GPU.
inline int indexer_topk_splits(int num_tokens, int num_sms) {
  if (num_tokens <= 0) return 1;
  const int splits = (2 * num_sms + num_tokens - 1) / num_tokens;
  return splits < 1 ? 1 : splits > kMaxIndexerSplits ? kMaxIndexerSplits : splits;
}

void launch_select_compressed(const SelectCompressedParams& params, cudaStream_t stream);

}  // namespace tern::kernels
