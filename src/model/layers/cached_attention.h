#pragma once
// Attention of a layer over the paged KV cache, whole or split over the ranks of a decode-context-parallel group.
// Under decode context parallelism each rank caches every size-th token of each sequence (KvContextShard) and
// computes, for every query head, attention over its own tokens with its log-sum-exp; the ranks gather each
// other's (output, lse) and merge them weighted by exp(lse), which gives every rank the exact attention.
#include "backend/backend.h"

namespace tern {

// Causal attention of q [T, heads, key_dim] -> [T, heads, value_dim] (Backend::attention, or the merged partial
// attentions of the ranks when `cache` holds one rank's share of the tokens).
Tensor cached_attention(Backend& backend, const Tensor& query, const KvCache& cache, int layer,
                        const AttentionParams& params, const StepContext& step);

}  // namespace tern
