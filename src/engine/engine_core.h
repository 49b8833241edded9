#pragma once
// The engine's step loop without threads: requests in, one step at a time, outputs out. Sizes the KV pool from
// the config and the model's per-token KV bytes, then pairs a Scheduler (host bookkeeping) with a ModelRunner
// (device work). The threaded Engine drives one; tests and the offline benchmark drive it directly.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "engine/draft_proposer.h"
#include "engine/engine_config.h"
#include "engine/host_pool_disk_tier.h"
#include "engine/model_runner.h"
#include "engine/request.h"
#include "engine/scheduler.h"
#include "engine/sharded_model.h"
#include "engine/text_stream.h"
#include "kvcache/kv_cache_budget.h"
#include "kvcache/kv_cache_manager.h"
#include "model/model.h"

namespace tern {

// Where one step's time went: the scheduler's host work (schedule + update) and the model runner's (launching the
// step and waiting for sampled ids: with overlap scheduling, those of the step launched before).
struct StepTiming {
  double schedule_s = 0.0;
  double execute_s = 0.0;
  double update_s = 0.0;
  int64_t num_tokens = 0;
  int32_t num_sequences = 0;
};

class EngineCore {
 public:
  EngineCore(Model& model, Backend& backend, EngineConfig config, TextStreamFactory text_streams = {});
  // Every rank of a tensor-parallel group runs each step; rank 0's sampled tokens are the step's result. The KV
  // pool has the same blocks on every rank (each holds its heads), sized by the rank with the least memory.
  // Under data-parallel attention each rank runs (and samples) its own sequences with a KV pool of its own, of that
  // size; the step's result is the ranks' tokens in plan order.
  EngineCore(ShardedModel& model, EngineConfig config, TextStreamFactory text_streams = {});

  // Throws tern::Error naming what is wrong with the request. Reads only immutable state: safe from any thread.
  void validate(const GenerateRequest& request) const;
  void add_request(uint64_t request_id, GenerateRequest request);
  std::vector<RequestOutput> abort(uint64_t request_id, const std::string& error = {});
  // Schedules and launches one step and applies the step before it; returns the outputs that produced. With
  // overlap scheduling (EngineConfig::overlap_schedule) the step launched last is left running on the device,
  // its sampled ids unread, while the host applies the previous one and returns; where that is not sound (a row
  // sampled on the host, an empty plan) the step runs synchronously after the one in flight.
  std::vector<RequestOutput> step();
  bool has_unfinished_requests() const { return scheduler_->has_unfinished_requests(); }
  std::vector<uint64_t> unfinished_request_ids() const { return scheduler_->unfinished_request_ids(); }

  // Prefill/decode disaggregation (tensor parallel size 1). The KV of blocks [first_block, first_block + max_blocks)
  // of `prompt` that the prefix cache holds, as self-describing bytes (kv_block_transfer.h); only blocks a request
  // for `prompt` could reuse are exported (the last prompt token is always recomputed), and the export stops at the
  // first block not cached. Empty (zero blocks) when nothing is cached.
  std::vector<uint8_t> export_prompt_kv(std::span<const int32_t> prompt, int32_t first_block, int32_t max_blocks);
  // The same with the payload written to `payload` (host memory or a shared buffer of this engine's backend, room
  // for kv_payload_bytes(max_blocks)); returns the header, which holds the block count.
  std::vector<uint8_t> export_prompt_kv_to(std::span<const int32_t> prompt, int32_t first_block, int32_t max_blocks,
                                           void* payload);
  // Puts an export of `prompt`'s blocks from `first_block` on into the prefix cache, so that a request for `prompt`
  // reuses them. Returns how many blocks were newly imported (0 when the blocks before first_block are not cached,
  // or all were cached already). Throws tern::Error when the bytes do not fit this engine's cache.
  int32_t import_prompt_kv(std::span<const int32_t> prompt, int32_t first_block, std::span<const uint8_t> bytes);
  // The same from a header and its payload apart (host memory or a shared buffer this engine's backend opened).
  int32_t import_prompt_kv_from(std::span<const int32_t> prompt, int32_t first_block, std::span<const uint8_t> header,
                                const void* payload);
  // Bytes of the payload of `num_blocks` blocks.
  size_t kv_payload_bytes(int32_t num_blocks) const;
  // Backend::create_shared_buffer / open_shared_buffer of the (single) rank.
  std::unique_ptr<SharedBuffer> create_shared_buffer(size_t bytes);
  std::unique_ptr<SharedBuffer> open_shared_buffer(std::span<const uint8_t> handle);

  EngineStats stats() const;
  const StepTiming& last_step_timing() const { return last_step_timing_; }
  const KvCacheBudget& kv_budget() const { return budget_; }
  // Rank `rank`'s blocks under data-parallel attention (each rank has its own cache); else the one pool.
  const KvCacheManager& kv_cache_manager(int rank = 0) const { return *kvs_.at(static_cast<size_t>(rank)); }
  int64_t max_model_len() const { return max_model_len_; }

 private:
  // A launched step whose result is not applied yet: its plan and each rank's pending ids.
  struct InFlightStep {
    StepPlan plan;
    std::vector<PendingStep> ranks;
  };

  void start(EngineConfig config, TextStreamFactory text_streams);
  // A pool that cannot hold one sequence of max_model_len tokens: fails where the length was asked for (vLLM
  // refuses to start too), else lowers the model's context to what fits, with a warning.
  void fit_max_model_len_to_cache(const std::vector<KvCacheGroup>& groups, int32_t scheduler_block_size,
                                  bool max_model_len_given);
  // Launches the plan on every rank.
  std::vector<PendingStep> launch(const StepPlan& plan);
  // Shows the proposer the applied step's chunks and the target's hidden states (DraftProposer::observe).
  void observe(const StepPlan& plan, std::span<const Tensor> hidden_states);
  // What the disk tier's files of a KV cache manager are for: the model, backend, KV layout and rank.
  std::string kv_identity(const EngineConfig& config, int data_parallel_rank) const;
  // Runs the tier copies decided outside a step (prefill/decode KV export and import) at once.
  void run_tier_copies();
  ModelRunner& leader() { return *runners_.front(); }
  void require_one_rank(const char* what) const;
  // The step's result from each rank's: rank 0's, or under data parallelism every rank's tokens in plan order.
  StepResult merge_results(const StepPlan& plan, std::vector<StepResult> results) const;
  // Calls `use` with the block ids of blocks [first_block, first_block + max_blocks) of `prompt` that the prefix
  // cache holds (see export_prompt_kv), keeping them referenced meanwhile.
  void with_cached_prompt_blocks(std::span<const int32_t> prompt, int32_t first_block, int32_t max_blocks,
                                 const std::function<void(std::span<const int32_t>)>& use);
  // Makes `num_blocks` blocks of `prompt` from `first_block` on cached (see import_prompt_kv) and calls `fill` with
  // the new ones and how many blocks before them were cached already; returns the number of new blocks.
  int32_t import_prompt_blocks(std::span<const int32_t> prompt, int32_t first_block, int32_t num_blocks,
                               const std::function<void(std::span<const int32_t>, int32_t)>& fill);

  std::unique_ptr<ShardedModel> single_rank_;  // the view of a Model and Backend given to the first constructor
  ShardedModel& model_;
  int64_t max_model_len_ = 0;
  KvCacheBudget budget_;
  std::vector<std::unique_ptr<HostPoolDiskTier>> disk_tiers_;  // one per KV cache manager, with a disk tier
  std::vector<std::unique_ptr<KvCacheManager>> kvs_;  // one, or one per data-parallel rank
  std::unique_ptr<Scheduler> scheduler_;
  std::vector<std::unique_ptr<ModelRunner>> runners_;  // one per rank
  bool overlap_schedule_ = true;
  std::optional<InFlightStep> in_flight_;  // after runners_: destroyed (its copies waited for) first
  StepTiming last_step_timing_;
  // Speculative decoding's drafts. Made in start() before the runners, so that a draft model's runner, which
  // discards the backend's recorded steps when made, comes first.
  std::unique_ptr<DraftProposer> proposer_;
  int32_t num_speculative_tokens_ = 0;
  int64_t eplb_interval_steps_ = 0;
  int64_t steps_since_placement_ = 0;
};

// Bytes of KV one token takes in `backend` for the model's layers, measured on a one-block allocation.
int64_t measure_kv_bytes_per_token(Backend& backend, const std::vector<KvLayerSpec>& layers, int32_t block_size,
                                   KvCacheDtype dtype = KvCacheDtype::automatic);

}  // namespace tern
