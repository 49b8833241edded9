#include "engine/model_runner.h"

#include <algorithm>
#include <atomic>
#include <future>
#include <thread>

#include "core/error.h"
#include "model/layers/sparse_moe.h"

namespace tern {

namespace {

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
      recorded_steps_(backend, cache_, scratch_block, max_num_seqs),
      samples_tokens_(samples_tokens),
      data_parallel_rank_(data_parallel_rank) {}

Tensor ModelRunner::forward(const StepContext& step, Tensor& hidden_states) {
  if (!returned_layer_inputs_.empty()) {
    return model_.forward_with_layer_inputs(step, cache_, returned_layer_inputs_, hidden_states);
  }
  if (returns_hidden_states_) return model_.forward_with_hidden_states(step, cache_, hidden_states);
  return model_.forward(step, cache_);
}

StepOutputs ModelRunner::greedy_forward(const StepContext& step) {
  StepOutputs outputs;
  outputs.ids = backend_.argmax(forward(step, outputs.hidden_states));
  return outputs;
}

std::optional<Tensor> ModelRunner::run_recorded(const ForwardBatch& batch, PendingStep& pending) {
  auto outputs = recorded_steps_.run(batch, [this](const StepContext& step) { return greedy_forward(step); });
  if (!outputs) return std::nullopt;
  if (returns_hidden_states_) pending.hidden_states = outputs->hidden_states.rows(0, batch.num_tokens());
  return outputs->ids.rows(0, static_cast<int64_t>(batch.logit_rows.size()));
}

int ModelRunner::record_steps(int32_t max_chunk_tokens, bool rows_at_last_token) {
  return recorded_steps_.record(max_chunk_tokens, rows_at_last_token,
                                [this](const StepContext& step) { return greedy_forward(step); });
}

void ModelRunner::return_hidden_states() {
  returns_hidden_states_ = true;
  recorded_steps_.discard();  // recorded without them
}

void ModelRunner::return_layer_inputs(std::vector<int32_t> layers) {
  returned_layer_inputs_ = std::move(layers);
  return_hidden_states();
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
    if (it == samplers_.end() || !samples_on_device(it->second)) return false;
  }
  return true;
}

Tensor ModelRunner::greedy_ids(const ForwardBatch& batch, PendingStep& pending) {
  if (auto ids = run_recorded(batch, pending)) return *ids;
  const auto step = backend_.begin_step(batch);
  return backend_.argmax(forward(*step, pending.hidden_states));
}

PendingStep ModelRunner::launch_device_verify(const StepPlan& plan, const ForwardBatch& batch,
                                              std::span<SequenceSampler* const> chunk_samplers,
                                              bool all_plain_greedy) {
  // A sequence's rows here are several, so no later step takes an in-flight token from this one.
  previous_ids_ = Tensor{};
  previous_rows_.clear();
  PendingStep pending;
  // Sampled rows in chunk order, each draft's row verifying it (its acceptance draw, then its residual's), then the
  // row after the last draft; greedy sequences' rows take the argmax.
  std::vector<DeviceVerifyChunk> chunks;
  std::vector<RowSampling> rows;
  size_t next_sampler = 0;
  for (const auto& chunk : plan.chunks) {
    if (!chunk.sample) continue;
    const auto drafts = std::span<const int32_t>(chunk.token_ids).last(static_cast<size_t>(chunk.num_draft_tokens));
    chunks.push_back({chunk.sequence_id, {drafts.begin(), drafts.end()}});
    SequenceSampler& sampler = *chunk_samplers[next_sampler++];
    if (all_plain_greedy) continue;
    for (int32_t draft : drafts) rows.push_back(sampler.device_row(draft));
    rows.push_back(sampler.device_row());
  }
  Tensor ids;
  if (all_plain_greedy) {
    ids = greedy_ids(batch, pending);
  } else {
    const auto step = backend_.begin_step(batch);
    ids = *backend_.sample(forward(*step, pending.hidden_states), rows);
  }
  if (!samples_tokens_) return pending;
  pending.device_verify = std::move(chunks);
  pending.device_ids = backend_.to_host_i32_async(ids);
  return pending;
}

StepResult ModelRunner::finish_device_verify(PendingStep step) {
  const std::vector<int32_t> ids = step.device_ids->wait();
  size_t first_row = 0;
  for (const DeviceVerifyChunk& chunk : step.device_verify) {
    const auto sampler = samplers_.find(chunk.sequence_id);
    for (size_t i = 0; i <= chunk.draft_ids.size(); ++i) {
      const int32_t id = ids.at(first_row + i);
      step.result.tokens.push_back({chunk.sequence_id, id, std::nullopt});
      if (sampler != samplers_.end()) sampler->second.record(id);
      if (i == chunk.draft_ids.size() || id != chunk.draft_ids[i]) break;
    }
    first_row += chunk.draft_ids.size() + 1;
  }
  return std::move(step.result);
}

PendingStep ModelRunner::launch_verify(const StepPlan& plan, const ForwardBatch& batch,
                                       std::span<SequenceSampler* const> chunk_samplers) {
  // No row samples on the device, so no later step takes an in-flight token from this one.
  previous_ids_ = Tensor{};
  previous_rows_.clear();
  const auto step = backend_.begin_step(batch);
  PendingStep pending;
  const Tensor logits = forward(*step, pending.hidden_states);
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
  host_cache_ = backend_.allocate_host_kv_cache(model_.kv_layers(), num_blocks, cache_.block_size, cache_.dtype);
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
    // The token in flight is the sequence's last, followed by the drafts of a verify chunk.
    const auto last = static_cast<int64_t>(chunk.token_ids.size()) - 1 - chunk.num_draft_tokens;
    if (last >= 0 && chunk.token_ids[static_cast<size_t>(last)] == kTokenInFlight) {
      const auto row = previous_rows_.find(chunk.sequence_id);
      if (row == previous_rows_.end()) {
        fail("model runner: sequence {}'s last token is in flight, but the previous step did not sample it on the "
             "device", chunk.sequence_id);
      }
      const auto index = static_cast<int32_t>(batch.token_ids.size() - chunk.token_ids.size() + last);
      batch.token_ids[static_cast<size_t>(index)] = 0;  // a valid id until the backend fills in the sampled one
      batch.deferred_tokens.push_back({index, row->second});
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
  if (verifies_drafts) {
    const bool on_device = std::all_of(row_samplers.begin(), row_samplers.end(),
                                       [&](const SequenceSampler* sampler) { return samples_on_device(*sampler); });
    return on_device ? launch_device_verify(plan, batch, row_samplers, all_plain_greedy)
                     : launch_verify(plan, batch, row_samplers);
  }

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

  // Greedy steps of short chunks (decode steps): a recorded graph per shape; only the ids come back.
  if (all_plain_greedy) {
    if (auto ids = run_recorded(batch, pending)) return finish_launch(*ids, std::vector<bool>(num_rows, true));
  }

  std::vector<SequenceSampler*> constrained;
  for (SequenceSampler* sampler : row_samplers) {
    if (samples_tokens_ && sampler->is_constrained()) constrained.push_back(sampler);
  }
  std::future<void> masks = prepare_masks_async(std::move(constrained));

  const auto step = backend_.begin_step(batch);
  const Tensor logits = forward(*step, pending.hidden_states);
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
  if (!step.device_verify.empty()) return finish_device_verify(std::move(step));
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
