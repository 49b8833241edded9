#include "model/layers/cached_attention.h"

namespace tern {

Tensor cached_attention(Backend& backend, const Tensor& query, const KvCache& cache, int layer,
                        const AttentionParams& params, const StepContext& step) {
  const int64_t num_ranks = cache.context_shard.size;
  if (num_ranks == 1) return backend.attention(query, cache, layer, params, step);
  const AttentionPartial partial = backend.partial_attention(query, cache, layer, params, step);
  const int64_t num_tokens = query.size(0);
  const int64_t num_heads = query.size(1);
  const int64_t value_dim = partial.out.size(2);
  const int64_t num_rows = num_tokens * num_heads;
  // Rank r's columns land at [r * width, (r + 1) * width): [T * heads, ranks * value_dim] is [T, heads, ranks, dim].
  const Tensor outs = backend.all_gather_columns(partial.out.reshape({num_rows, value_dim}), num_ranks * value_dim);
  const Tensor lses = backend.all_gather_columns(partial.lse.reshape({num_rows, 1}), num_ranks);
  return backend.merge_attention_partials(outs.reshape({num_tokens, num_heads, num_ranks, value_dim}),
                                          lses.reshape({num_tokens, num_heads, num_ranks}));
}

}  // namespace tern
