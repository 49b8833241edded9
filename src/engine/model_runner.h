#pragma once
// The device side of a step: turns a StepPlan into a ForwardBatch, runs the model over the paged KV cache, and
// samples each finished chunk's next token with that sequence's sampler. Owns the KV cache storage and the
// per-sequence sampling state; knows nothing of scheduling.
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>
#include <unordered_map>

#include "backend/backend.h"
#include "engine/sampler.h"
#include "engine/step_plan.h"
#include "engine/step_recorder.h"
#include "model/model.h"

namespace tern {

// A chunk of a verify step sampled on the device, whose drafts are checked against the target's ids once they are
// read back.
struct DeviceVerifyChunk {
  uint64_t sequence_id = 0;
  std::vector<int32_t> draft_ids;  // its logit rows are 1 + draft_ids.size(), in order
};

// A step launched on the backend whose sampled ids have not been read yet (ModelRunner::launch, then finish).
struct PendingStep {
  StepResult result;  // a token per sampled row; rows sampled on the device get their ids in finish
  std::vector<bool> from_device;           // per row of `result`: its id is row r of device_ids
  std::unique_ptr<PendingIds> device_ids;  // null when no row samples on the device, or on a rank that does not sample
  // A verify step sampled on the device: `device_ids` holds the target's id at every logit row (its argmax, or its
  // draw that keeps the row's draft or replaces it, Backend::sample), and finish keeps each chunk's drafts up to the
  // first that differs from the target's id there, then that id (or the id after the last draft). `result` is then
  // filled in by finish.
  std::vector<DeviceVerifyChunk> device_verify;
  // With ModelRunner::return_hidden_states: the model's hidden states at every token of the step [T, hidden] in the
  // backend's memory, chunks back to back in plan order (Model::forward_with_hidden_states); with
  // return_layer_inputs, its layers' inputs [T, layers * hidden] likewise; else empty.
  Tensor hidden_states;
};

class ModelRunner {
 public:
  // `scratch_block`: a KV block outside the scheduler's pool (or -1 for none). With one, greedy steps of short
  // chunks (decode steps, verify steps, a draft model's steps) are padded with sequences that write only that block
  // up to a batch-size bucket (at most `max_num_seqs`) and run as recorded graphs on backends that record steps
  // (CUDA graphs).
  // `samples_tokens`: false for the tensor-parallel ranks other than the first, which run the same forward steps
  // (their collectives meet the first rank's) but leave host sampling and reading ids back to it; their results
  // hold no tokens. They still pick the device-sampled ids, which their next step's tokens in flight come from.
  // `data_parallel_rank` >= 0: data-parallel attention (Backend::data_parallel), where this runner computes and
  // samples only the plan's chunks of that rank (ScheduledChunk::rank) in its own KV cache; with none in a step it
  // still serves the other ranks' tokens in every MoE layer (serve_expert_peers). -1: every chunk.
  ModelRunner(Model& model, Backend& backend, KvCache cache, int32_t scratch_block = -1, int32_t max_num_seqs = 0,
              bool samples_tokens = true, int32_t data_parallel_rank = -1);
  ModelRunner(const ModelRunner&) = delete;
  ModelRunner& operator=(const ModelRunner&) = delete;

  // Launches the plan's step and returns without waiting for its sampled ids when every sampled row samples on
  // the device (else the host samples its rows before returning). A chunk whose last token (before its drafts) is
  // kTokenInFlight gets the id this runner's previous step sampled for that sequence, filled in on the device
  // (ForwardBatch's deferred tokens); that step must have sampled the sequence on the device. A chunk with drafts
  // gets a logit row per draft too, and its result tokens are the drafts kept and one more (StepResult). Where
  // every row samples on the device, only the target's ids leave it and the drafts are checked in finish.
  PendingStep launch(const StepPlan& plan);
  // Waits for the step's ids and returns its result.
  StepResult finish(PendingStep step);
  // True when every row the plan samples samples on the device (no grammar mask, logprobs or host-side
  // processors; a verify chunk's rows included), so that the overlap scheduler may launch it before reading the
  // previous step's ids. Takes in the plan's new and finished sequences (launch does too).
  bool samples_on_device(const StepPlan& plan);
  const KvCache& kv_cache() const { return cache_; }
  // Whole blocks of the cache as host bytes (Backend::export_kv_blocks), and the payload alone to or from memory
  // the backend addresses (Backend::export_kv_blocks_to / import_kv_blocks_from).
  std::vector<uint8_t> export_kv_blocks(std::span<const int32_t> blocks) { return backend_.export_kv_blocks(cache_, blocks); }
  void export_kv_blocks_to(std::span<const int32_t> blocks, void* payload) {
    backend_.export_kv_blocks_to(cache_, blocks, payload);
  }
  void import_kv_blocks_from(std::span<const int32_t> blocks, const KvPayloadView& payload) {
    backend_.import_kv_blocks_from(cache_, blocks, payload);
  }
  // The host tier's pool of `num_blocks` blocks, the twin of the device cache (Backend::allocate_host_kv_cache).
  void allocate_host_kv_cache(int32_t num_blocks);
  KvCache& host_kv_cache() { return host_cache_; }
  // Runs copies between the device cache and the host tier, in order (see StepPlan::kv_tier_copies); launch runs
  // the plan's. Until wait_kv_copies returns, the host must neither read nor write the host tier's memory.
  void copy_tier_blocks(std::span<const KvTierCopy> copies);
  void wait_kv_copies() { backend_.wait_kv_copies(); }
  double kv_copy_seconds() { return backend_.kv_copy_seconds(); }
  // From now on every step also returns the model's hidden states (PendingStep::hidden_states), for a proposer
  // that drafts from them (MTP); recorded steps return them too, so call this before record_steps.
  void return_hidden_states();
  // The same with the inputs of the target's `layers` side by side in place of its hidden states
  // (Model::forward_with_layer_inputs), for a proposer that drafts from them (EAGLE-3).
  void return_layer_inputs(std::vector<int32_t> layers);
  // Records the steps of every batch-size bucket now (at start), so that no step pays for a recording later:
  // decode steps, and with `max_chunk_tokens` > 1 the steps whose chunks take up to that many tokens on average,
  // with a logit row at every token (verify steps of up to max_chunk_tokens - 1 drafts) or, with
  // `rows_at_last_token`, at each chunk's last (a draft model catching up with accepted tokens). Returns the
  // number of steps recorded (0 where the backend does not record).
  int record_steps(int32_t max_chunk_tokens = 1, bool rows_at_last_token = false);

 private:
  // The model's forward over the step, with its hidden states into `hidden_states` where they are asked for.
  Tensor forward(const StepContext& step, Tensor& hidden_states);
  // The forward a recorded greedy step runs: the argmax ids, and the hidden states where they are asked for.
  StepOutputs greedy_forward(const StepContext& step);
  // A greedy step of short chunks recorded (StepRecorder): the ids of its logit rows, its hidden states into
  // `pending` where they are asked for. nullopt where it does not fit a bucket or the backend does not record.
  std::optional<Tensor> run_recorded(const ForwardBatch& batch, PendingStep& pending);
  // The target's ids at every row of the steps's logits: recorded where the step fits, else eagerly.
  Tensor greedy_ids(const ForwardBatch& batch, PendingStep& pending);
  // A step with drafts to verify whose rows all sample on the device (`chunk_samplers`: one per sampled chunk, in
  // plan order): an argmax per row where all are plain greedy (recorded where the step fits), else the backend's
  // sampler with each draft verified in its row; the ids come back and finish checks the drafts.
  PendingStep launch_device_verify(const StepPlan& plan, const ForwardBatch& batch,
                                   std::span<SequenceSampler* const> chunk_samplers, bool all_plain_greedy);
  // A step with drafts to verify (ScheduledChunk::num_draft_tokens) and rows the host samples: every row goes there,
  // where each sequence's sampler keeps a prefix of its drafts (SequenceSampler::verify). `chunk_samplers`: one per
  // sampled chunk, in plan order.
  PendingStep launch_verify(const StepPlan& plan, const ForwardBatch& batch,
                            std::span<SequenceSampler* const> chunk_samplers);
  // finish for a verify step sampled on the device.
  StepResult finish_device_verify(PendingStep step);
  void apply_sequence_changes(const StepPlan& plan);
  bool samples_on_device(const SequenceSampler& sampler) const;

  Model& model_;
  Backend& backend_;
  KvCache cache_;
  StepRecorder recorded_steps_;  // reads cache_
  KvCache host_cache_;  // the host tier's twin of cache_ (no blocks without one)
  bool samples_tokens_ = true;
  bool returns_hidden_states_ = false;
  std::vector<int32_t> returned_layer_inputs_;  // with returns_hidden_states_: these layers' inputs instead
  int32_t data_parallel_rank_ = -1;
  std::unordered_map<uint64_t, SequenceSampler> samplers_;
  // The last launched step's sampled ids [R] int32 in the backend's memory, and the row of each sequence it sampled
  // on the device: where the next step's in-flight tokens come from.
  Tensor previous_ids_;
  std::unordered_map<uint64_t, int32_t> previous_rows_;
};

}  // namespace tern
