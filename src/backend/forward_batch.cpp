#include "backend/forward_batch.h"

#include "core/error.h"

namespace tern {

std::vector<int32_t> batch_positions(const ForwardBatch& batch) {
  std::vector<int32_t> positions;
  positions.reserve(batch.token_ids.size());
  for (const auto& seq : batch.sequences) {
    for (int32_t i = 0; i < seq.num_new_tokens; ++i) positions.push_back(seq.num_cached_tokens + i);
  }
  if (positions.size() != batch.token_ids.size()) {
    fail("forward batch: sequences hold {} new tokens but the batch has {} token ids", positions.size(),
         batch.token_ids.size());
  }
  return positions;
}

bool logit_rows_are_tokens(const ForwardBatch& batch) {
  if (static_cast<int64_t>(batch.logit_rows.size()) != batch.num_tokens()) return false;
  for (size_t i = 0; i < batch.logit_rows.size(); ++i) {
    if (batch.logit_rows[i] != static_cast<int32_t>(i)) return false;
  }
  return true;
}

void check_deferred_tokens(const ForwardBatch& batch) {
  if (batch.deferred_tokens.empty()) return;
  if (batch.previous_sampled_ids.dtype != DType::I32 || batch.previous_sampled_ids.shape.size() != 1) {
    fail("forward batch: {} deferred tokens need the previous step's sampled ids as an int32 vector",
         batch.deferred_tokens.size());
  }
  const int64_t num_rows = batch.previous_sampled_ids.numel();
  for (const DeferredToken& token : batch.deferred_tokens) {
    if (token.token_index < 0 || token.token_index >= batch.num_tokens()) {
      fail("forward batch: deferred token index {} outside the batch's {} tokens", token.token_index,
           batch.num_tokens());
    }
    if (token.previous_row < 0 || token.previous_row >= num_rows) {
      fail("forward batch: deferred token {} reads row {} of the previous step's {} sampled ids", token.token_index,
           token.previous_row, num_rows);
    }
  }
}

ForwardBatch with_deferred_tokens(const ForwardBatch& batch, std::span<const int32_t> previous_ids) {
  ForwardBatch resolved = batch;
  for (const DeferredToken& token : batch.deferred_tokens) {
    if (token.token_index < 0 || token.token_index >= batch.num_tokens() || token.previous_row < 0 ||
        static_cast<size_t>(token.previous_row) >= previous_ids.size()) {
      fail("forward batch: deferred token {} (row {}) outside the batch's {} tokens or the {} previous ids",
           token.token_index, token.previous_row, batch.num_tokens(), previous_ids.size());
    }
    resolved.token_ids[static_cast<size_t>(token.token_index)] = previous_ids[static_cast<size_t>(token.previous_row)];
  }
  resolved.deferred_tokens.clear();
  resolved.previous_sampled_ids = {};
  return resolved;
}

std::vector<int64_t> batch_slots(const ForwardBatch& batch, int64_t block_size, int group,
                                 const KvContextShard& shard) {
  const int64_t tokens_per_block = shard.tokens_per_block(block_size);
  std::vector<int64_t> slots;
  slots.reserve(batch.token_ids.size());
  for (const auto& seq : batch.sequences) {
    const int64_t total = static_cast<int64_t>(seq.num_cached_tokens) + seq.num_new_tokens;
    if (group >= static_cast<int>(seq.block_tables.size())) {
      fail("forward batch: a sequence has {} block tables, none for KV cache group {}", seq.block_tables.size(), group);
    }
    const auto& table = seq.block_tables[group];
    if (static_cast<int64_t>(table.size()) * tokens_per_block < total) {
      fail("forward batch: a sequence of {} tokens has only {} blocks of {} in group {}", total, table.size(),
           tokens_per_block, group);
    }
    for (int64_t pos = seq.num_cached_tokens; pos < total; ++pos) {
      if (!shard.holds(pos)) {
        slots.push_back(-1);
        continue;
      }
      const int32_t block = table[pos / tokens_per_block];
      if (block < 0) fail("forward batch: position {} of group {} lies in a dropped block", pos, group);
      slots.push_back(shard.slot(block, pos, block_size));
    }
  }
  return slots;
}

}  // namespace tern
