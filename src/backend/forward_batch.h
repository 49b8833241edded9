#pragma once
// One step's work for the model, as plain host data: the new tokens of every sequence back to back, where each
// sequence's KV lives (block tables into the paged KV cache), and which rows need logits.
// The engine builds it; the backend turns it into its own memory once per step (StepContext).
#include <cstdint>
#include <span>
#include <vector>

#include "backend/kv_context_shard.h"
#include "backend/tensor.h"

namespace tern {

struct SequenceChunk {
  int32_t num_cached_tokens = 0;  // tokens of this sequence already in the KV cache (context before this chunk)
  int32_t num_new_tokens = 0;     // tokens computed in this step; their KV is written to the cache
  // Per KV cache group (KvCache::groups): the blocks covering cached + new tokens, in order. A sliding-window
  // group's table holds -1 for blocks before its window, which no layer of the group reads.
  std::vector<std::vector<int32_t>> block_tables;
  // Length of the sequence's prompt, 0 when unknown (then this chunk's end counts as the prompt's). Only
  // DeepSeek-V4's indexer reads it, to break score ties as transformers does (v4_ops.cpp select_compressed).
  int32_t num_prompt_tokens = 0;
};

// A token whose id the host does not have yet (overlap scheduling): row `previous_row` of the previous step's
// sampled ids, which are still on the device (or on their way to the host) when this step is built.
struct DeferredToken {
  int32_t token_index = 0;   // into ForwardBatch::token_ids
  int32_t previous_row = 0;  // into ForwardBatch::previous_sampled_ids
};

struct ForwardBatch {
  std::vector<int32_t> token_ids;  // [num_tokens]: sequences' new tokens back to back
  std::vector<SequenceChunk> sequences;
  std::vector<int32_t> logit_rows;  // token rows whose logits are returned, in output order
  // Filled in by the backend in its own memory when the step begins (begin_step / run_recorded_step), before any
  // op reads the ids; token_ids holds 0 at their places until then.
  std::vector<DeferredToken> deferred_tokens;
  Tensor previous_sampled_ids;  // [R] int32 in the backend's memory: the previous step's ids (set with deferred_tokens)

  int64_t num_tokens() const { return static_cast<int64_t>(token_ids.size()); }
};

// Whether the logit rows are every token's row in order (a decode step's), so that gathering them changes nothing.
bool logit_rows_are_tokens(const ForwardBatch& batch);

// `batch` with its deferred tokens' ids taken from `previous_ids` (host values of previous_sampled_ids): the
// definition the backends implement in their memory. Fails naming a token index or row out of range.
ForwardBatch with_deferred_tokens(const ForwardBatch& batch, std::span<const int32_t> previous_ids);
// Fails unless every deferred token indexes token_ids and a row of previous_sampled_ids.
void check_deferred_tokens(const ForwardBatch& batch);

// Token positions ([num_tokens]) of a batch's new tokens, and their KV cache slots (block * block_size + offset) in
// the block tables of group `group`, for a cache of `block_size` slots per block holding `shard`'s tokens; -1 for a
// token that another rank of the context-parallel group caches.
std::vector<int32_t> batch_positions(const ForwardBatch& batch);
std::vector<int64_t> batch_slots(const ForwardBatch& batch, int64_t block_size, int group = 0,
                                 const KvContextShard& shard = {});

}  // namespace tern
