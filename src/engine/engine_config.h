#pragma once
// Engine settings: KV pool size, batching limits, policies.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "backend/kv_cache.h"
#include "engine/scheduler.h"
#include "engine/speculative_config.h"

namespace tern {

struct EngineConfig {
  int32_t block_size = 16;  // tokens per KV block
  // What the KV caches store, the target's and a draft model's or MTP layer's (vLLM's --kv-cache-dtype).
  KvCacheDtype kv_cache_dtype = KvCacheDtype::automatic;
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
  // Speculative decoding (vLLM's --speculative-config); nullopt: one token per decode step. With overlap
  // scheduling a verify step is applied at once (its token count is known only once its drafts are verified); it
  // is launched before the one-token step in flight is applied where its proposer drafts past a token in flight
  // (prompt lookup), while a model's drafts wait for that step (DraftProposer::drafts_past_token_in_flight).
  std::optional<SpeculativeConfig> speculative;
  // The KV cache's tiers below the device pool (SGLang's HiCache, vLLM's KV offloading). A host pool of this many
  // bytes (0: none; pinned memory on CUDA) takes the prefix cache's blocks the device evicts, or every cached block
  // at once with kv_write_through; a prefix hit there loads them back, layer by layer beside the step's compute.
  int64_t host_kv_cache_bytes = 0;
  bool kv_write_through = false;
  // A disk tier below the host pool (empty: none): host blocks evicted are written to files under this directory,
  // at most kv_cache_dir_bytes of them, which a restarted engine of the same model finds again.
  std::string kv_cache_dir;
  int64_t kv_cache_dir_bytes = int64_t{64} << 30;
  // What the disk tier's files are for (the commands make it from the model's files): an engine reads only blocks
  // written under the same identity, backend and KV layout.
  std::string model_identity;
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
  // KV cache tiers (EngineConfig::host_kv_cache_bytes, kv_cache_dir): prompt tokens of prefix hits loaded from the
  // host and the disk tier (part of prefix_hit_tokens); the host pool; what moved between the device and the host
  // (bytes each way, the copies' device seconds); and the disk tier's traffic.
  int64_t prefix_host_hit_tokens = 0;
  int64_t prefix_disk_hit_tokens = 0;
  int64_t num_host_kv_blocks = 0;
  int64_t num_host_kv_blocks_cached = 0;
  int64_t kv_bytes_to_host = 0;
  int64_t kv_bytes_to_device = 0;
  double kv_copy_seconds = 0.0;
  bool kv_disk_tier = false;
  int64_t kv_disk_blocks = 0;
  int64_t kv_disk_bytes = 0;
  int64_t kv_disk_read_bytes = 0;
  int64_t kv_disk_write_bytes = 0;
  double kv_disk_read_seconds = 0.0;
  double kv_disk_write_seconds = 0.0;
  int64_t kv_disk_corrupt_records = 0;
  // Tokens a verify step yields on average: 1 + kept drafts per verification (0 before any).
  double mean_acceptance_length() const {
    return num_spec_drafts ? 1.0 + static_cast<double>(num_spec_accepted_tokens) / num_spec_drafts : 0.0;
  }
};

}  // namespace tern
