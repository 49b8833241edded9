#pragma once
// DeepSeek-V4's Lightning Indexer top-k over the compressed entries of the paged cache (layout in
// src/backend/compressed_kv.h): per token, score(e) = sum_h relu(q_h . k_e) * softmax_scale * w_h * weights_scale
// in float32 for every closed window e < (position + 1) / compress_rate, and the top_k entries by that score, best
// first, equal scores to the lower entry, -1 past the closed windows.
//
// Two phases. Scoring spreads a token's entries over num_splits blocks (grid tokens x splits); each block holds the
// token's query in shared memory, scores tiles of 128 entries as a register-tiled float32 product (a warp per 8
// heads, a lane per entry) and keeps its best entries in a shared candidate list pruned by an exact radix select.
// With one split that block writes the sorted answer; with several each writes its at most top_k candidates to the
// workspace and a merge block per token streams them through the same candidate list. Grids and workspace are sized
// by the step's tokens (never by context length), so recorded CUDA graphs replay at any length.
#include <cstdint>

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
  // Blocks that share a token's entries (indexer_topk_splits); past 1 the workspace below holds their candidates.
  int num_splits = 1;
  uint64_t* split_candidates = nullptr;  // [num_tokens, num_splits, top_k]: score key << 32 | ~entry
  int32_t* split_counts = nullptr;       // [num_tokens, num_splits]
};

constexpr int kMaxIndexerTopK = 2048;
constexpr int kMaxIndexerSplits = 256;

// Splits per token for a step of num_tokens: about two scoring blocks per SM in all, one split once the tokens
// alone fill the GPU (then no merge runs).
inline int indexer_topk_splits(int num_tokens, int num_sms) {
  if (num_tokens <= 0) return 1;
  const int splits = (2 * num_sms + num_tokens - 1) / num_tokens;
  return splits < 1 ? 1 : splits > kMaxIndexerSplits ? kMaxIndexerSplits : splits;
}

void launch_select_compressed(const SelectCompressedParams& params, cudaStream_t stream);

}  // namespace tern::kernels
