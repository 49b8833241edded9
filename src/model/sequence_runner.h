#pragma once
// Runs one sequence through a model with a KV cache of its own: the path of `tern logits` and of the
// single-request benchmark. Serving goes through the engine's scheduler instead.
#include <cstdint>
#include <span>
#include <vector>

#include "model/model.h"

namespace tern {

class SequenceRunner {
 public:
  // Reserves KV blocks for up to `max_tokens` tokens, stored as `kv_dtype`.
  SequenceRunner(Model& model, Backend& backend, int64_t max_tokens, int64_t block_size = 16,
                 KvCacheDtype kv_dtype = KvCacheDtype::automatic);

  // Appends `tokens` to the sequence; returns logits [tokens.size(), vocab] if all_logits, else [1, vocab]
  // for the last token.
  Tensor append(std::span<const int32_t> tokens, bool all_logits);
  int64_t num_tokens() const { return num_tokens_; }

 private:
  Model& model_;
  Backend& backend_;
  KvCache cache_;
  std::vector<std::vector<int32_t>> block_tables_;  // per KV cache group
  int64_t num_tokens_ = 0;
};

// Block tables for a sequence that owns num_groups * num_blocks blocks from `first_block` on (a whole cache where
// it is 0): group g gets blocks [first_block + g * num_blocks, first_block + (g + 1) * num_blocks), since the groups
// share the storage of a block id.
std::vector<std::vector<int32_t>> own_block_tables(int64_t num_groups, int64_t num_blocks, int64_t first_block = 0);

// Greedy decoding of `max_new_tokens` tokens after `prompt`, the KV cache stored as `kv_dtype`.
std::vector<int32_t> greedy_generate(Model& model, Backend& backend, std::span<const int32_t> prompt,
                                     int64_t max_new_tokens, KvCacheDtype kv_dtype = KvCacheDtype::automatic);

}  // namespace tern
