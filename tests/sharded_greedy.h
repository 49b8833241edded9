#pragma once
// Greedy tokens of one request through an engine over a (possibly tensor-parallel) model, for the tests that
// compare sharded models with unsharded ones.
#include <cstdint>
#include <vector>

#include "engine/engine_core.h"
#include "engine/sharded_model.h"

namespace tern::testing {

inline std::vector<int32_t> sharded_greedy_tokens(ShardedModel& model, const std::vector<int32_t>& prompt,
                                                  int32_t max_tokens, int64_t eplb_interval_steps = 0,
                                                  int32_t block_size = 16) {
  EngineConfig config;
  config.eplb_interval_steps = eplb_interval_steps;
  config.block_size = block_size;
  config.num_kv_blocks = 64;
  config.max_num_seqs = 8;
  config.max_num_batched_tokens = 512;
  config.log_kv_cache = false;
  EngineCore core(model, config);
  GenerateRequest request;
  request.prompt_token_ids = prompt;
  request.sampling.temperature = 0.0f;
  request.stop.max_tokens = max_tokens;
  request.stop.ignore_eos = true;
  core.add_request(1, std::move(request));
  std::vector<int32_t> tokens;
  while (core.has_unfinished_requests()) {
    for (const auto& out : core.step()) tokens.insert(tokens.end(), out.token_ids.begin(), out.token_ids.end());
  }
  return tokens;
}

}  // namespace tern::testing
