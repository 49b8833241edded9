#include "engine/model_runner.h"

#include <algorithm>
#include <atomic>
#include <future>
#include <thread>

#include "core/error.h"
#include "model/layers/sparse_moe.h"

namespace tern {

namespace {

// vLLM's capture sizes, thinned: padding a decode batch costs little (its GEMMs are bound by weight reads), each
// bucket costs a recording at start.
constexpr int32_t kDecodeBuckets[] = {1,   2,   4,   8,   16,  24,  32,  48,  64,  80,
                                      96,  128, 160, 192, 224, 256, 320, 384, 448, 512};

// Prepares the grammar masks of the constrained rows on worker threads, so that they are ready when the step's
// logits are: the device (or the CPU backend's own threads) runs the forward meanwhile.
std::future<void> prepare_masks_async(std::vector<SequenceSampler*> constrained) {
  if (constrained.empty()) return {};
  return std::async(std::launch::async, [samplers = std::move(constrained)] {
    const size_t num_workers =
        std::min<size_t>(samplers.size(), std::clamp(std::thread::hardware_concurrency(), 1u, 8u));
    std::atomic<size_t> next{0};
    const auto work = [&] {
      for (size_t i = next++; i < samplers.size(); i = next++) samplers[i]->prepare_mask();
    };
    std::vector<std::future<void>> helpers;
    for (size_t w = 1; w < num_workers; ++w) helpers.push_back(std::async(std::launch::async, work));
    work();
    for (auto& helper : helpers) helper.get();  // rethrows a helper's error
  });
}

}  // namespace

ModelRunner::ModelRunner(Model& model, Backend& backend, KvCache cache, int32_t scratch_block, int32_t max_num_seqs,
                         bool samples_tokens, int32_t data_parallel_rank)
    : model_(model),
      backend_(backend),
      cache_(std::move(cache)),
      scratch_block_(scratch_block),
      samples_tokens_(samples_tokens),
      data_parallel_rank_(data_parallel_rank) {
  // Steps an earlier runner recorded on this backend read and write that runner's KV cache, not this one's: a
  // backend keeps its recordings by batch shape, so a second engine on the same model would replay them.
  backend_.discard_recorded_steps();
  if (scratch_block_ < 0) return;
  if (scratch_block_ >= cache_.num_blocks) {
    fail("model runner: scratch block {} outside the cache's {} blocks", scratch_block_, cache_.num_blocks);
  }
  for (int32_t bucket : kDecodeBuckets) {
    if (bucket <= max_num_seqs) decode_buckets_.push_back(bucket);
  }
}

Tensor ModelRunner::forward(const StepContext& step, PendingStep& pending) {
  if (returns_hidden_states_) return model_.forward_with_hidden_states(step, cache_, pending.hidden_states);
  return model_.forward(step, cache_);
}

int32_t ModelRunner::bucket_for(size_t num_seqs) const {
  for (int32_t bucket : decode_buckets_) {
    if (static_cast<size_t>(bucket) >= num_seqs) return bucket;
  }
  return 0;
}

std::optional<Tensor> ModelRunner::run_recorded_decode(const ForwardBatch& unpadded, int32_t bucket) {
  ForwardBatch batch = unpadded;
  while (batch.sequences.size() < static_cast<size_t>(bucket)) {
    batch.logit_rows.push_back(static_cast<int32_t>(batch.token_ids.size()));
    batch.token_ids.push_back(0);
    batch.sequences.push_back({0, 1, std::vector<std::vector<int32_t>>(cache_.groups.size(), {scratch_block_})});
  }
  auto ids = backend_.run_recorded_step(
      batch, [this](const StepContext& step) { return backend_.argmax(model_.forward(step, cache_)); });
  if (!ids) decode_buckets_.clear();  // the backend does not record: every step runs eagerly
  return ids;
}

int ModelRunner::record_decode_steps() {
  int recorded = 0;
  for (int32_t bucket : decode_buckets_) {
    if (!run_recorded_decode(ForwardBatch{}, bucket)) return 0;
    ++recorded;
  }
  return recorded;
}

void ModelRunner::apply_sequence_changes(const StepPlan& plan) {
  for (uint64_t id : plan.finished_sequence_ids) samplers_.erase(id);
  for (const auto& seq : plan.new_sequences) {
    samplers_.try_emplace(seq.sequence_id, seq.sampling, seq.seed, seq.prompt_token_ids);
  }
}

bool ModelRunner::samples_on_device(const SequenceSampler& sampler) const {
  return sampler.is_plain_greedy() || (backend_.samples_on_device() && sampler.samples_on_device());
}

bool ModelRunner::samples_on_device(const StepPlan& plan) {
  apply_sequence_changes(plan);
  for (const auto& chunk : plan.chunks) {
    if (!chunk.sample) continue;
    const auto it = samplers_.find(chunk.sequence_id);
    if (it == samplers_.end() || chunk.num_draft_tokens > 0 || !samples_on_device(it->second)) return false;
  }
  return true;
}

PendingStep ModelRunner::launch_verify(const StepPlan& plan, const ForwardBatch& batch,
                                       std::span<SequenceSampler* const> chunk_samplers) {
  // No row samples on the device, so no later step takes an in-flight token from this one.
  previous_ids_ = Tensor{};
  previous_rows_.clear();
  const auto step = backend_.begin_step(batch);
  PendingStep pending;
  const Tensor logits = forward(*step, pending);
  if (!samples_tokens_) return pending;
  std::vector<float> host = backend_.to_host_f32(logits);
  const size_t vocab = host.size() / batch.logit_rows.size();
  size_t first_row = 0;
  size_t next_sampler = 0;
  for (const auto& chunk : plan.chunks) {
    if (!chunk.sample) continue;
    SequenceSampler& sampler = *chunk_samplers[next_sampler++];
    const auto num_rows = static_cast<size_t>(chunk.num_draft_tokens) + 1;
    const std::span<float> rows(host.data() + first_row * vocab, num_rows * vocab);
    first_row += num_rows;
    const auto draft_ids = std::span<const int32_t>(chunk.token_ids).last(static_cast<size_t>(chunk.num_draft_tokens));
    for (auto& outcome : sampler.verify(rows, draft_ids)) {
      pending.result.tokens.push_back({chunk.sequence_id, outcome.token_id, std::move(outcome.logprob)});
    }
  }
  return pending;
}

void ModelRunner::allocate_host_kv_cache(int32_t num_blocks) {
  host_cache_ = backend_.allocate_host_kv_cache(model_.kv_layers(), num_blocks, cache_.block_size);
}

void ModelRunner::copy_tier_blocks(std::span<const KvTierCopy> copies) {
  // Runs of one direction go in one call, which the backend issues layer by layer.
  for (size_t i = 0; i < copies.size();) {
    const KvTierCopy::Direction direction = copies[i].direction;
    std::vector<int32_t> device_blocks;
    std::vector<int32_t> host_blocks;
    for (; i < copies.size() && copies[i].direction == direction; ++i) {
      device_blocks.push_back(copies[i].device_block);
      host_blocks.push_back(copies[i].host_block);
    }
    if (direction == KvTierCopy::Direction::kToHost) {
      backend_.copy_kv_blocks(cache_, device_blocks, host_cache_, host_blocks);
    } else {
      backend_.copy_kv_blocks(host_cache_, host_blocks, cache_, device_blocks);
    }
  }
}

PendingStep ModelRunner::launch(const StepPlan& whole_plan) {
  const size_t tier_index = data_parallel_rank_ >= 0 ? static_cast<size_t>(data_parallel_rank_) : 0;
  if (tier_index < whole_plan.kv_tier_copies.size()) copy_tier_blocks(whole_plan.kv_tier_copies[tier_index]);
  apply_sequence_changes(whole_plan);
  PendingStep pending;
  if (whole_plan.chunks.empty()) return pending;
  // Under data parallelism: this rank's chunks (samplers of every sequence are kept, which costs little and lets
  // the first rank decide for all whether a step samples on the device).
  std::optional<StepPlan> rank_plan;
  if (data_parallel_rank_ >= 0) {
    rank_plan.emplace();
    for (const auto& chunk : whole_plan.chunks) {
      if (chunk.rank == data_parallel_rank_) rank_plan->chunks.push_back(chunk);
    }
    if (rank_plan->chunks.empty()) {
      serve_expert_peers(model_, backend_);
      previous_rows_.clear();
      return pending;
    }
  }
  const StepPlan& plan = rank_plan ? *rank_plan : whole_plan;

  ForwardBatch batch;
  batch.token_ids.reserve(static_cast<size_t>(plan.num_tokens()));
  batch.sequences.reserve(plan.chunks.size());
  std::vector<SequenceSampler*> row_samplers;
  bool all_plain_greedy = true;
  bool verifies_drafts = false;
  for (const auto& chunk : plan.chunks) {
    batch.token_ids.insert(batch.token_ids.end(), chunk.token_ids.begin(), chunk.token_ids.end());
    if (!chunk.token_ids.empty() && chunk.token_ids.back() == kTokenInFlight) {
      const auto row = previous_rows_.find(chunk.sequence_id);
      if (row == previous_rows_.end()) {
        fail("model runner: sequence {}'s last token is in flight, but the previous step did not sample it on the "
             "device", chunk.sequence_id);
      }
      batch.token_ids.back() = 0;  // a valid id until the backend fills in the sampled one
      batch.deferred_tokens.push_back({static_cast<int32_t>(batch.token_ids.size() - 1), row->second});
    }
    batch.sequences.push_back({chunk.num_cached_tokens, static_cast<int32_t>(chunk.token_ids.size()), chunk.block_tables,
                               chunk.num_prompt_tokens});
    if (!chunk.sample) continue;
    const auto it = samplers_.find(chunk.sequence_id);
    if (it == samplers_.end()) fail("model runner: sequence {} was scheduled before it was announced", chunk.sequence_id);
    // A verify chunk's logits: after its last token and after each of its drafts.
    const auto end = static_cast<int32_t>(batch.token_ids.size());
    for (int32_t row = end - 1 - chunk.num_draft_tokens; row < end; ++row) batch.logit_rows.push_back(row);
    verifies_drafts = verifies_drafts || chunk.num_draft_tokens > 0;
    row_samplers.push_back(&it->second);
    all_plain_greedy = all_plain_greedy && it->second.is_plain_greedy();
  }
  if (!batch.deferred_tokens.empty()) batch.previous_sampled_ids = previous_ids_;
  if (verifies_drafts) return launch_verify(plan, batch, row_samplers);

  const size_t num_rows = row_samplers.size();
  std::vector<uint64_t> row_sequence_ids;
  row_sequence_ids.reserve(num_rows);
  for (const auto& chunk : plan.chunks) {
    if (chunk.sample) row_sequence_ids.push_back(chunk.sequence_id);
  }
  // Every rank keeps the step's device ids (the ranks' logits are equal, and so are their samplers' draws): the
  // next step's in-flight tokens are filled in from them on each rank. Only a sampling rank reads them back.
  const auto finish_launch = [&](Tensor device_ids, std::vector<bool> from_device) {
    previous_ids_ = device_ids;
    previous_rows_.clear();
    for (size_t r = 0; r < num_rows; ++r) {
      if (from_device[r]) previous_rows_[row_sequence_ids[r]] = static_cast<int32_t>(r);
    }
    if (samples_tokens_ && device_ids.data) pending.device_ids = backend_.to_host_i32_async(device_ids);
    pending.from_device = std::move(from_device);
    return std::move(pending);
  };
  if (samples_tokens_) {
    pending.result.tokens.reserve(num_rows);
    for (uint64_t id : row_sequence_ids) pending.result.tokens.push_back({id, 0, std::nullopt});
  }

  // Greedy decode steps: a recorded graph per batch-size bucket; only the ids come back.
  const bool all_decode = std::all_of(plan.chunks.begin(), plan.chunks.end(), [](const ScheduledChunk& chunk) {
    return chunk.sample && chunk.token_ids.size() == 1;
  });
  const bool recordable = all_plain_greedy && all_decode && !returns_hidden_states_;
  const int32_t bucket = recordable ? bucket_for(plan.chunks.size()) : 0;
  if (bucket > 0) {
    if (auto ids = run_recorded_decode(batch, bucket)) {
      return finish_launch(ids->rows(0, static_cast<int64_t>(num_rows)), std::vector<bool>(num_rows, true));
    }
  }

  std::vector<SequenceSampler*> constrained;
  for (SequenceSampler* sampler : row_samplers) {
    if (samples_tokens_ && sampler->is_constrained()) constrained.push_back(sampler);
  }
  std::future<void> masks = prepare_masks_async(std::move(constrained));

  const auto step = backend_.begin_step(batch);
  const Tensor logits = forward(*step, pending);
  if (masks.valid()) masks.get();
  if (row_samplers.empty()) return finish_launch(Tensor{}, {});

  // Rows whose logits must come to the host: processors the device lacks, logprobs, or a grammar mask.
  std::vector<bool> from_device(num_rows);
  size_t num_host_rows = 0;
  bool device_rows_plain_greedy = true;
  for (size_t r = 0; r < num_rows; ++r) {
    from_device[r] = samples_on_device(*row_samplers[r]);
    num_host_rows += !from_device[r];
    if (from_device[r]) device_rows_plain_greedy = device_rows_plain_greedy && row_samplers[r]->is_plain_greedy();
  }
  Tensor device_ids;
  if (num_host_rows < num_rows) {
    // Only the ids leave the device: an argmax when every such row is greedy, else the device's sampler (host
    // rows ride along as greedy rows whose ids are dropped).
    if (device_rows_plain_greedy) {
      device_ids = backend_.argmax(logits);
    } else {
      std::vector<RowSampling> rows(num_rows);
      for (size_t r = 0; r < num_rows; ++r) {
        if (!from_device[r]) rows[r].temperature = 0.0f;
        else rows[r] = row_samplers[r]->device_row();
      }
      device_ids = *backend_.sample(logits, rows);
    }
  }
  if (samples_tokens_ && num_host_rows > 0) {
    std::vector<float> host = backend_.to_host_f32(logits);
    const size_t vocab = host.size() / num_rows;
    for (size_t r = 0; r < num_rows; ++r) {
      if (from_device[r]) continue;
      auto outcome = row_samplers[r]->sample(std::span<float>(host.data() + r * vocab, vocab));
      pending.result.tokens[r].token_id = outcome.token_id;
      pending.result.tokens[r].logprob = std::move(outcome.logprob);
    }
  }
  return finish_launch(std::move(device_ids), std::move(from_device));
}

StepResult ModelRunner::finish(PendingStep step) {
  if (step.device_ids) {
    const std::vector<int32_t> ids = step.device_ids->wait();
    for (size_t r = 0; r < step.result.tokens.size(); ++r) {
      if (!step.from_device[r]) continue;
      SampledToken& token = step.result.tokens[r];
      token.token_id = ids.at(r);
      // A sequence finished meanwhile has no sampler left, and its token is dropped by the scheduler.
      if (const auto it = samplers_.find(token.sequence_id); it != samplers_.end()) it->second.record(token.token_id);
    }
  }
  return std::move(step.result);
}

}  // namespace tern
