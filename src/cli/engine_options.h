#pragma once
// The engine and sampling flags shared by the commands that run the engine (generate, bench, serve).
#include <CLI/CLI.hpp>
#include <optional>
#include <string>

#include "engine/engine_config.h"
#include "engine/sampling_params.h"

namespace tern::cli {

struct EngineFlags {
  int tensor_parallel_size = 1;  // not EngineConfig fields: they decide how the model is loaded
  int expert_parallel_size = 1;
  int64_t num_redundant_experts = 0;
  int decode_context_parallel_size = 1;
  std::optional<int64_t> eplb_interval_steps;  // unset: eplb_interval_or_default
  std::string kv_cache_memory;  // e.g. "2GiB"; empty: kv_cache_fraction, else the default below
  double kv_cache_fraction = 0.0;
  int32_t block_size = 16;
  int32_t max_num_batched_tokens = 2048;
  int32_t max_num_seqs = 256;
  int64_t max_model_len = 0;
  bool no_prefix_cache = false;
  bool no_chunked_prefill = false;
  std::string policy = "fcfs";
  std::string overlap_schedule = "on";

  void add_to(CLI::App& cmd);
  // The engine config; without a memory flag the KV cache gets `default_memory` (e.g. "1GiB").
  EngineConfig to_config(const std::string& default_memory) const;
};

// --decode-context-parallel-size (--dcp), shared by the commands that load a model.
void add_decode_context_parallel_option(CLI::App& cmd, int& decode_context_parallel_size);

// Flags of expert-parallel load balancing shared by the commands: --num-redundant-experts and --eplb-interval.
void add_expert_balancing_options(CLI::App& cmd, int64_t& num_redundant_experts,
                                  std::optional<int64_t>& eplb_interval_steps);
// The --eplb-interval given, else rebalancing every 1000 steps when there are redundant experts to place (the slots
// pay only when placed by load) and never otherwise.
int64_t eplb_interval_or_default(const std::optional<int64_t>& eplb_interval_steps, int64_t num_redundant_experts);

struct SamplingFlags {
  float temperature = 0.0f;  // greedy unless asked otherwise
  int32_t top_k = 0;
  float top_p = 1.0f;
  float min_p = 0.0f;
  float repetition_penalty = 1.0f;
  float frequency_penalty = 0.0f;
  float presence_penalty = 0.0f;
  std::optional<uint64_t> seed;
  bool ignore_eos = false;

  void add_to(CLI::App& cmd);
  SamplingParams to_params() const;
};

}  // namespace tern::cli
