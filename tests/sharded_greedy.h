#pragma once
// Greedy tokens and logits through a (possibly tensor-, expert- or data-parallel) model, for the tests that compare
// sharded models with unsharded ones.
#include <cstdint>
#include <vector>

#include "engine/engine_core.h"
#include "engine/sharded_model.h"
#include "model/layers/sparse_moe.h"
#include "model/sequence_runner.h"

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

// Last-token logits of `prompt` from rank 0 (every rank runs the step).
inline std::vector<float> prompt_logits(ShardedModel& model, const std::vector<int32_t>& prompt) {
  std::vector<float> logits;
  model.run_on_ranks([&](int rank) {
    SequenceRunner runner(model.model(rank), model.backend(rank), static_cast<int64_t>(prompt.size()));
    const Tensor out = runner.append(prompt, false);
    if (rank == 0) logits = model.backend(rank).to_host_f32(out);
  });
  return logits;
}

// All logits [T, vocab] of each prompt under data parallelism, prompt p run on rank p at once (ranks past the
// prompts only serve the others' tokens in the MoE layers).
inline std::vector<std::vector<float>> logits_on_ranks(ShardedModel& model,
                                                       const std::vector<std::vector<int32_t>>& prompts) {
  std::vector<std::vector<float>> logits(prompts.size());
  model.run_on_ranks([&](int rank) {
    if (rank >= static_cast<int>(prompts.size())) {
      serve_expert_peers(model.model(rank), model.backend(rank));
      return;
    }
    const auto& prompt = prompts[rank];
    SequenceRunner runner(model.model(rank), model.backend(rank), static_cast<int64_t>(prompt.size()));
    logits[rank] = model.backend(rank).to_host_f32(runner.append(prompt, true));
  });
  return logits;
}

}  // namespace tern::testing
