#include "engine/draft_model_proposer.h"

#include <algorithm>
#include <utility>

#include "core/error.h"

namespace tern {

namespace {

SamplingParams greedy_params() {
  SamplingParams params;
  params.temperature = 0.0f;
  return params;
}

}  // namespace

DraftModelProposer::DraftModelProposer(ShardedModel& ranks, std::vector<std::unique_ptr<Model>> models,
                                       int32_t num_blocks, int32_t block_size, int32_t num_speculative_tokens,
                                       int32_t max_num_seqs, KvCacheDtype kv_dtype)
    : ranks_(ranks),
      models_(std::move(models)),
      kv_(num_blocks, block_size, /*enable_prefix_cache=*/false, 0,
          group_sliding_windows(kv_cache_groups(models_.at(0)->kv_layers()))),
      runners_(models_.size()) {
  if (static_cast<int>(models_.size()) != ranks.size()) {
    fail("draft model: {} shards for {} ranks", models_.size(), ranks.size());
  }
  for (const auto& group : kv_cache_groups(models_[0]->kv_layers())) {
    has_sliding_window_ = has_sliding_window_ || group.sliding_window_tokens > 0;
  }
  ranks.run_on_ranks([&](int rank) {
    Backend& backend = ranks.backend(rank);
    Model& model = *models_[static_cast<size_t>(rank)];
    runners_[static_cast<size_t>(rank)] = std::make_unique<ModelRunner>(
        model, backend,
        backend.allocate_kv_cache(model.kv_layers(), num_blocks + (max_num_seqs > 0 ? 1 : 0), block_size, kv_dtype),
        max_num_seqs > 0 ? num_blocks : -1, max_num_seqs, /*samples_tokens=*/rank == 0);
    // Its first forward of a step catches up with the tokens the target accepted (at most k + 1), then one a
    // forward.
    runners_[static_cast<size_t>(rank)]->record_steps(num_speculative_tokens + 1, /*rows_at_last_token=*/true);
  });
}

std::vector<PendingStep> DraftModelProposer::launch(const StepPlan& plan) {
  std::vector<PendingStep> step(runners_.size());
  ranks_.run_on_ranks([&](int rank) { step[rank] = runners_[rank]->launch(plan); });
  return step;
}

StepResult DraftModelProposer::finish(std::vector<PendingStep> step) {
  std::vector<StepResult> results(runners_.size());
  ranks_.run_on_ranks([&](int rank) { results[rank] = runners_[rank]->finish(std::move(step[rank])); });
  return std::move(results[0]);
}

void DraftModelProposer::drop(uint64_t sequence_id) {
  const auto it = sequences_.find(sequence_id);
  if (it == sequences_.end()) return;
  kv_.free(it->second.blocks);
  sequences_.erase(it);
  // The runner drops its sampler with the next plan it runs (before it adds the sequence again, if it does).
  dropped_.push_back(sequence_id);
}

void DraftModelProposer::forget(std::span<const uint64_t> sequence_ids) {
  for (uint64_t id : sequence_ids) drop(id);
}

bool DraftModelProposer::allocate(DraftSequence& seq, int64_t num_computed, int64_t num_tokens,
                                  std::span<const DraftRequest> requests) {
  if (kv_.allocate(seq.blocks, num_computed, num_tokens)) return true;
  std::vector<uint64_t> idle;
  for (const auto& [id, other] : sequences_) {
    const bool drafting = std::any_of(requests.begin(), requests.end(),
                                      [&](const DraftRequest& request) { return request.sequence_id == id; });
    if (!drafting) idle.push_back(id);
  }
  for (uint64_t id : idle) drop(id);
  return kv_.allocate(seq.blocks, num_computed, num_tokens);
}

DraftTokens DraftModelProposer::propose(std::span<const DraftRequest> requests) {
  DraftTokens drafts;
  const int64_t max_len = models_[0]->config().max_position_embeddings;
  // The first forward: each sequence's tokens its cache lacks, the last always among them; its logits give the
  // first draft.
  StepPlan plan;
  std::vector<const DraftRequest*> drafting;
  for (const auto& request : requests) {
    const auto num_tokens = static_cast<int64_t>(request.token_ids.size());
    if (max_len > 0 && num_tokens + request.max_draft_tokens > max_len) continue;
    auto [it, added] = sequences_.try_emplace(request.sequence_id);
    if (added) plan.new_sequences.push_back({request.sequence_id, greedy_params(), 0, {}});
    DraftSequence& seq = it->second;
    const auto& computed = seq.computed_token_ids;
    auto num_valid = static_cast<int64_t>(
        std::mismatch(computed.begin(), computed.end(), request.token_ids.begin(), request.token_ids.end()).first -
        computed.begin());
    // A sliding-window group may have dropped blocks that a recomputation from further back reads again.
    if (has_sliding_window_ && num_valid < static_cast<int64_t>(computed.size())) {
      kv_.free(seq.blocks);
      num_valid = 0;
    }
    num_valid = std::min(num_valid, num_tokens - 1);
    if (!allocate(seq, num_valid, num_tokens, requests)) {
      if (added) plan.new_sequences.pop_back();
      drop(request.sequence_id);
      continue;
    }
    seq.computed_token_ids.assign(request.token_ids.begin(), request.token_ids.end());
    ScheduledChunk chunk;
    chunk.sequence_id = request.sequence_id;
    chunk.num_cached_tokens = static_cast<int32_t>(num_valid);
    chunk.token_ids.assign(request.token_ids.begin() + num_valid, request.token_ids.end());
    chunk.block_tables = seq.blocks.tables;
    chunk.sample = true;
    chunk.num_prompt_tokens = request.num_prompt_tokens;
    plan.chunks.push_back(std::move(chunk));
    drafting.push_back(&request);
  }
  // Then one token a forward, each fed the draft the forward before sampled, until every sequence has its k: the
  // steps are launched before any is read back (how many a sequence takes is known from its k alone).
  std::vector<std::vector<PendingStep>> launched;
  std::vector<std::vector<const DraftRequest*>> step_requests;
  while (!plan.chunks.empty()) {
    plan.finished_sequence_ids = std::exchange(dropped_, {});
    launched.push_back(launch(plan));
    step_requests.push_back(drafting);
    StepPlan next;
    std::vector<const DraftRequest*> still_drafting;
    const auto num_steps = static_cast<int32_t>(launched.size());
    for (const DraftRequest* request : drafting) {
      if (num_steps >= request->max_draft_tokens) continue;
      DraftSequence& seq = sequences_.at(request->sequence_id);
      const auto position = static_cast<int64_t>(seq.computed_token_ids.size());
      if (!allocate(seq, position, position + 1, requests)) continue;
      seq.computed_token_ids.push_back(kTokenInFlight);  // the draft, once read back
      ScheduledChunk chunk;
      chunk.sequence_id = request->sequence_id;
      chunk.num_cached_tokens = static_cast<int32_t>(position);
      chunk.token_ids = {kTokenInFlight};
      chunk.block_tables = seq.blocks.tables;
      chunk.sample = true;
      chunk.num_prompt_tokens = request->num_prompt_tokens;
      next.chunks.push_back(std::move(chunk));
      still_drafting.push_back(request);
    }
    plan = std::move(next);
    drafting = std::move(still_drafting);
  }
  for (size_t step = 0; step < launched.size(); ++step) {
    const StepResult result = finish(std::move(launched[step]));
    for (size_t i = 0; i < result.tokens.size(); ++i) {
      const DraftRequest& request = *step_requests[step][i];
      std::vector<int32_t>& tokens = drafts[request.sequence_id];
      tokens.push_back(result.tokens[i].token_id);
      // The draft fed to the next forward (the sequence's tokens, then its drafts in order).
      auto& computed = sequences_.at(request.sequence_id).computed_token_ids;
      const size_t fed = request.token_ids.size() + tokens.size() - 1;
      if (fed < computed.size()) computed[fed] = tokens.back();
    }
  }
  return drafts;
}

}  // namespace tern
