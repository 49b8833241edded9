#include "engine/model_runner.h"

#include "core/error.h"

namespace tern {

ModelRunner::ModelRunner(Model& model, Backend& backend, KvCache cache)
    : model_(model), backend_(backend), cache_(std::move(cache)) {}

StepResult ModelRunner::execute(const StepPlan& plan) {
  for (uint64_t id : plan.finished_sequence_ids) samplers_.erase(id);
  for (const auto& seq : plan.new_sequences) {
    samplers_.try_emplace(seq.sequence_id, seq.sampling, seq.seed, seq.prompt_token_ids);
  }
  StepResult result;
  if (plan.chunks.empty()) return result;

  ForwardBatch batch;
  batch.token_ids.reserve(static_cast<size_t>(plan.num_tokens()));
  batch.sequences.reserve(plan.chunks.size());
  std::vector<SequenceSampler*> row_samplers;
  bool all_plain_greedy = true;
  for (const auto& chunk : plan.chunks) {
    batch.token_ids.insert(batch.token_ids.end(), chunk.token_ids.begin(), chunk.token_ids.end());
    batch.sequences.push_back({chunk.num_cached_tokens, static_cast<int32_t>(chunk.token_ids.size()), chunk.block_table});
    if (!chunk.sample) continue;
    const auto it = samplers_.find(chunk.sequence_id);
    if (it == samplers_.end()) fail("model runner: sequence {} was scheduled before it was announced", chunk.sequence_id);
    batch.logit_rows.push_back(static_cast<int32_t>(batch.token_ids.size() - 1));
    row_samplers.push_back(&it->second);
    all_plain_greedy = all_plain_greedy && it->second.is_plain_greedy();
  }

  const auto step = backend_.begin_step(batch);
  const Tensor logits = model_.forward(*step, cache_);
  if (row_samplers.empty()) return result;

  std::vector<int32_t> sequence_of_row;
  for (const auto& chunk : plan.chunks) {
    if (chunk.sample) sequence_of_row.push_back(static_cast<int32_t>(&chunk - plan.chunks.data()));
  }
  result.tokens.reserve(row_samplers.size());
  if (all_plain_greedy) {
    // Only the ids leave the device.
    const auto ids = backend_.to_host_i32(backend_.argmax(logits));
    for (size_t r = 0; r < ids.size(); ++r) {
      row_samplers[r]->record(ids[r]);
      result.tokens.push_back({plan.chunks[sequence_of_row[r]].sequence_id, ids[r], std::nullopt});
    }
    return result;
  }
  std::vector<float> host = backend_.to_host_f32(logits);
  const size_t vocab = host.size() / row_samplers.size();
  for (size_t r = 0; r < row_samplers.size(); ++r) {
    auto outcome = row_samplers[r]->sample(std::span<float>(host.data() + r * vocab, vocab));
    result.tokens.push_back({plan.chunks[sequence_of_row[r]].sequence_id, outcome.token_id, std::move(outcome.logprob)});
  }
  return result;
}

}  // namespace tern
