#include "model/sequence_runner.h"

#include "core/error.h"

namespace tern {

SequenceRunner::SequenceRunner(Model& model, Backend& backend, int64_t max_tokens, int64_t block_size,
                               KvCacheDtype kv_dtype)
    : model_(model), backend_(backend) {
  const int64_t num_blocks = (max_tokens + block_size - 1) / block_size;
  const auto num_groups = static_cast<int64_t>(kv_cache_groups(model.kv_layers()).size());
  cache_ = backend.allocate_kv_cache(model.kv_layers(), num_groups * num_blocks, block_size, kv_dtype);
  block_tables_ = own_block_tables(num_groups, num_blocks);  // none is ever dropped
}

std::vector<std::vector<int32_t>> own_block_tables(int64_t num_groups, int64_t num_blocks, int64_t first_block) {
  std::vector<std::vector<int32_t>> tables(static_cast<size_t>(num_groups));
  for (int64_t g = 0; g < num_groups; ++g) {
    for (int64_t b = 0; b < num_blocks; ++b) tables[g].push_back(static_cast<int32_t>(first_block + g * num_blocks + b));
  }
  return tables;
}

Tensor SequenceRunner::append(std::span<const int32_t> tokens, bool all_logits) {
  if (tokens.empty()) fail("sequence runner: no tokens to append");
  const int64_t capacity = static_cast<int64_t>(block_tables_[0].size()) * cache_.block_size;
  if (num_tokens_ + static_cast<int64_t>(tokens.size()) > capacity) {
    fail("sequence of {} tokens exceeds the {} reserved", num_tokens_ + tokens.size(), capacity);
  }
  ForwardBatch batch;
  batch.token_ids.assign(tokens.begin(), tokens.end());
  batch.sequences.push_back({static_cast<int32_t>(num_tokens_), static_cast<int32_t>(tokens.size()), block_tables_});
  if (all_logits) {
    for (size_t i = 0; i < tokens.size(); ++i) batch.logit_rows.push_back(static_cast<int32_t>(i));
  } else {
    batch.logit_rows.push_back(static_cast<int32_t>(tokens.size() - 1));
  }
  const auto step = backend_.begin_step(batch);
  Tensor logits = model_.forward(*step, cache_);
  num_tokens_ += static_cast<int64_t>(tokens.size());
  return logits;
}

std::vector<int32_t> greedy_generate(Model& model, Backend& backend, std::span<const int32_t> prompt,
                                     int64_t max_new_tokens, KvCacheDtype kv_dtype) {
  SequenceRunner runner(model, backend, static_cast<int64_t>(prompt.size()) + max_new_tokens, 16, kv_dtype);
  std::vector<int32_t> generated;
  if (max_new_tokens <= 0) return generated;
  Tensor logits = runner.append(prompt, false);
  for (int64_t i = 0; i < max_new_tokens; ++i) {
    const int32_t next = backend.to_host_i32(backend.argmax(logits))[0];
    generated.push_back(next);
    if (i + 1 < max_new_tokens) logits = runner.append({&next, 1}, false);
  }
  return generated;
}

}  // namespace tern
