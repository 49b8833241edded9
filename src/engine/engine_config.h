#pragma once
// Engine settings: KV pool size, batching limits, policies.
#include <cstdint>
#include <optional>
#include <vector>

#include "engine/scheduler.h"
#include "engine/speculative_config.h"

namespace tern {

struct EngineConfig {
  int32_t block_size = 16;  // tokens per KV block
  // KV pool size, first that applies: an exact number of blocks (tests), a byte budget, or a fraction of the memory
  // the backend has available (vLLM's --gpu-memory-utilization; the CPU backend reads MemAvailable).
  int32_t num_kv_blocks = 0;
  int64_t kv_cache_memory_bytes = 0;
  double kv_cache_memory_fraction = 0.9;
  int32_t max_num_batched_tokens = 2048;
  int32_t max_num_seqs = 256;
  int64_t max_model_len = 0;  // 0: the model's max_position_embeddings
  bool enable_prefix_cache = true;
  bool enable_chunked_prefill = true;
  SchedulingPolicy policy = SchedulingPolicy::kFcfs;
  // Overlap scheduling (SGLang's overlap scheduler, vLLM's async scheduling): the host schedules and launches step
  // N+1 before it reads step N's sampled ids, so scheduling, batch building, stop checks and detokenizing run while
  // the device computes. Outputs are the same either way (tests/engine on the CPU backend,
  // tests/backend/cuda/cuda_engine_overlap_test on a GPU). The commands turn it on unless told otherwise
  // (`--overlap-schedule`); a config made in code runs one step at a time, which step-by-step tests rely on.
  bool overlap_schedule = false;
  bool log_kv_cache = true;  // print the KV pool's size on stderr at start
  // Expert-parallel load balancing (EPLB): every this many steps the MoE experts are placed again by the load
  // measured since the last placement (ShardedModel::rebalance_experts); 0: never. Needs expert parallelism.
  int64_t eplb_interval_steps = 0;
  // Speculative decoding (vLLM's --speculative-config); nullopt: one token per decode step. Turns overlap
  // scheduling off (a step's token count is known only once its drafts are verified) and, with a draft model,
  // recorded decode steps (the draft's eager steps share the backend).
  std::optional<SpeculativeConfig> speculative;
};

struct EngineStats {
  int32_t num_running = 0;
  int32_t num_waiting = 0;
  int32_t num_kv_blocks = 0;
  int32_t num_free_kv_blocks = 0;  // free or holding only cached prefixes
  double kv_usage = 0.0;           // fraction of blocks held by sequences
  int64_t prefix_query_tokens = 0;
  int64_t prefix_hit_tokens = 0;
  double prefix_hit_rate = 0.0;
  int64_t num_preemptions = 0;
  int64_t num_computed_tokens = 0;   // fed to the model, recomputation included
  int64_t num_generated_tokens = 0;
  int64_t num_finished_requests = 0;
  int64_t num_steps = 0;
  // Speculative decoding (SchedulerCounters): k, and the drafts verified and kept so far.
  int32_t num_speculative_tokens = 0;
  int64_t num_spec_drafts = 0;
  int64_t num_spec_draft_tokens = 0;
  int64_t num_spec_accepted_tokens = 0;
  std::vector<int64_t> num_spec_accepted_tokens_per_pos;
  // Tokens a verify step yields on average: 1 + kept drafts per verification (0 before any).
  double mean_acceptance_length() const {
    return num_spec_drafts ? 1.0 + static_cast<double>(num_spec_accepted_tokens) / num_spec_drafts : 0.0;
  }
};

}  // namespace tern
