#pragma once
// Decode context parallelism (src/backend/kv_context_shard.h): each rank of the group caches every size-th token
// of a sequence (position p on rank p % size, as its rank-local token p / size) and attends over those only; the
// ranks' partial attentions are then merged by their log-sum-exps.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace tern::kernels {

// local_positions[t] = the rank-local index of the last of its tokens that the query at positions[t] sees, causal
// by global position: (position - rank) / size, or -1 (no keys) for position < rank. Given to the split-KV
// attention kernels as the query positions, it makes them attend over the rank's tokens [0, local position],
// which lie in the block tables as an ordinary paged cache's.
void launch_context_shard_positions(const int32_t* positions, int32_t* local_positions, int num_tokens, int rank,
                                    int size, cudaStream_t stream);

struct MergeAttentionPartialsParams {
  const float* outs = nullptr;  // [num_rows, num_ranks, value_dim]: each rank's output for a (token, head) row
  const float* lses = nullptr;  // [num_rows, num_ranks]: natural log-sum-exp; -inf where a rank had no keys
  __nv_bfloat16* out = nullptr;  // [num_rows, value_dim]
  int num_rows = 0;
  int num_ranks = 0;
  int value_dim = 0;
};

// out = sum_r w_r * outs_r / sum_r w_r, w_r = exp(lse_r - max lse), summed in rank order (every rank gets the same
// bits); zero where no rank had keys.
void launch_merge_attention_partials(const MergeAttentionPartialsParams& params, cudaStream_t stream);

}  // namespace tern::kernels
