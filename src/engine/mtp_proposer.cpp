#include "engine/mtp_proposer.h"

#include <algorithm>
#include <utility>

#include "core/error.h"

namespace tern {

MtpProposer::MtpProposer(ShardedModel& ranks, std::vector<std::unique_ptr<MtpModel>> models, int32_t num_blocks,
                         int32_t block_size, bool enable_prefix_cache, int32_t num_speculative_tokens,
                         int32_t max_num_seqs, KvCacheDtype kv_dtype)
    : ranks_(ranks),
      models_(std::move(models)),
      kv_(num_blocks, block_size, enable_prefix_cache, 0,
          group_sliding_windows(kv_cache_groups(models_.at(0)->kv_layers()))),
      caches_(models_.size()),
      last_outputs_(models_.size()) {
  if (static_cast<int>(models_.size()) != ranks.size()) {
    fail("multi-token prediction: {} layers for {} ranks", models_.size(), ranks.size());
  }
  const int32_t scratch_block = max_num_seqs > 0 ? num_blocks : -1;
  for (RecordedSteps* recorded : {&observe_steps_, &draft_steps_}) {
    recorded->recorders.resize(models_.size());
    recorded->inputs.resize(models_.size());
  }
  ranks.run_on_ranks([&](int rank) {
    Backend& backend = ranks.backend(rank);
    caches_[rank] = backend.allocate_kv_cache(models_[rank]->kv_layers(), num_blocks + (scratch_block >= 0 ? 1 : 0),
                                              block_size, kv_dtype);
    for (RecordedSteps* recorded : {&observe_steps_, &draft_steps_}) {
      recorded->recorders[rank] = std::make_unique<StepRecorder>(backend, caches_[rank], scratch_block, max_num_seqs);
    }
  });
  // After a target step a sequence's chunk takes up to 1 + k entries; a chained draft one.
  observe_steps_.capacity = int64_t{observe_steps_.recorders[0]->max_sequences()} * (num_speculative_tokens + 1);
  draft_steps_.capacity = draft_steps_.recorders[0]->max_sequences();
}

int64_t MtpProposer::num_recorded_steps() const {
  return observe_steps_.recorders[0]->num_recorded_runs() + draft_steps_.recorders[0]->num_recorded_runs();
}

std::optional<StepOutputs> MtpProposer::run_recorded(int rank, const ForwardBatch& batch, const Tensor& input,
                                                     const std::vector<int32_t>& rows, RecordedSteps& recorded) {
  StepRecorder& recorder = *recorded.recorders[rank];
  const auto num_tokens = recorder.padded_tokens(batch);
  if (!num_tokens || *num_tokens > recorded.capacity) return std::nullopt;
  Backend& backend = ranks_.backend(rank);
  Tensor& buffer = recorded.inputs[rank];
  if (!buffer.data || buffer.dtype != input.dtype || buffer.row_numel() != input.row_numel()) {
    // Every row a copy of a real one, so that the padding's rows hold finite values.
    buffer = backend.select_rows(input, std::vector<int32_t>(static_cast<size_t>(recorded.capacity), rows[0]));
    recorder.discard();
  }
  Tensor step_input = buffer.rows(0, static_cast<int64_t>(rows.size()));
  backend.select_rows_into(input, rows, step_input);
  return recorder.run(batch, [&](const StepContext& step) {
    StepOutputs outputs;
    const Tensor padded_input = buffer.rows(0, step.batch().num_tokens());
    outputs.ids = backend.argmax(models_[rank]->forward(step, caches_[rank], padded_input, outputs.hidden_states));
    return outputs;
  });
}

std::vector<int32_t> MtpProposer::forward(const ForwardBatch& batch, std::span<const Tensor> inputs,
                                          const std::vector<int32_t>& rows, std::vector<Tensor>& outputs,
                                          RecordedSteps& recorded) {
  std::vector<int32_t> ids;
  outputs.assign(models_.size(), Tensor{});
  const auto num_rows = static_cast<int64_t>(batch.logit_rows.size());
  ranks_.run_on_ranks([&](int rank) {
    Backend& backend = ranks_.backend(rank);
    Tensor row_ids;
    if (auto step_outputs = run_recorded(rank, batch, inputs[rank], rows, recorded)) {
      row_ids = step_outputs->ids.rows(0, num_rows);
      outputs[rank] = step_outputs->hidden_states.rows(0, num_rows);
    } else {
      const auto step = backend.begin_step(batch);
      const Tensor logits =
          models_[rank]->forward(*step, caches_[rank], backend.select_rows(inputs[rank], rows), outputs[rank]);
      if (rank == 0 && num_rows > 0) row_ids = backend.argmax(logits);
    }
    if (rank != 0 || num_rows == 0) return;
    ids = backend.to_host_i32(row_ids);
    for (int32_t& id : ids) id = models_[0]->target_token_id(id);
  });
  return ids;
}

void MtpProposer::drop(uint64_t sequence_id) {
  const auto it = sequences_.find(sequence_id);
  if (it == sequences_.end()) return;
  kv_.free(it->second.blocks);
  sequences_.erase(it);
}

void MtpProposer::forget(std::span<const uint64_t> sequence_ids) {
  for (uint64_t id : sequence_ids) drop(id);
}

bool MtpProposer::allocate(MtpSequence& seq, int64_t num_computed, int64_t num_slots,
                           const std::unordered_set<uint64_t>& busy) {
  if (kv_.allocate(seq.blocks, num_computed, num_slots)) return true;
  std::vector<uint64_t> idle;
  for (const auto& [id, other] : sequences_) {
    if (!busy.count(id)) idle.push_back(id);
  }
  for (uint64_t id : idle) drop(id);
  return kv_.allocate(seq.blocks, num_computed, num_slots);
}

void MtpProposer::start_at(MtpSequence& seq, int32_t position, std::span<const int32_t> token_ids) {
  kv_.free(seq.blocks);
  seq.first_position = position;
  seq.end_position = position;
  if (position == 0 || !kv_.prefix_cache_enabled()) return;
  // The target's prefix hits are whole blocks: the layer's cache can match all of one (never more: one token past
  // the position is left to compute).
  if (kv_.match_prefix(seq.blocks, token_ids.first(static_cast<size_t>(position) + 1)) == position) {
    seq.first_position = 0;
  } else {
    kv_.free(seq.blocks);
  }
}

void MtpProposer::observe(std::span<const ComputedChunk> chunks, std::span<const Tensor> hidden_states) {
  std::unordered_set<uint64_t> busy;
  for (const auto& chunk : chunks) busy.insert(chunk.sequence_id);
  // First drafts point into last_outputs_, which this observe replaces.
  for (auto& [id, seq] : sequences_) seq.first_draft = -1;
  ForwardBatch batch;
  std::vector<int32_t> hidden_rows;        // per entry of the batch: its row of `hidden_states`
  std::vector<uint64_t> drafting;          // per logit row: the sequence whose first draft it is
  std::vector<std::span<const int32_t>> cached_tokens;  // per sequence of the batch, for its prefix cache
  std::vector<uint64_t> batch_ids;
  for (const auto& chunk : chunks) {
    if (chunk.token_ids.empty()) {
      drop(chunk.sequence_id);
      continue;
    }
    auto [it, added] = sequences_.try_emplace(chunk.sequence_id);
    MtpSequence& seq = it->second;
    // Hidden states are final for the positions before the sequence's last token; the entry at i also reads
    // token i + 1, known for those.
    const auto last = static_cast<int32_t>(chunk.token_ids.size()) - 1;
    const int32_t end = std::min(chunk.first_position + chunk.num_tokens, last);
    if (added || seq.end_position < chunk.first_position) start_at(seq, chunk.first_position, chunk.token_ids);
    const int32_t begin = seq.end_position;  // earlier rows (a recomputation after preemption) are cached already
    if (begin >= end) continue;
    if (!allocate(seq, begin - seq.first_position, end - seq.first_position, busy)) {
      drop(chunk.sequence_id);
      continue;
    }
    SequenceChunk entries;
    entries.num_cached_tokens = begin - seq.first_position;
    entries.num_new_tokens = end - begin;
    entries.block_tables = seq.blocks.tables;
    batch.sequences.push_back(std::move(entries));
    for (int32_t position = begin; position < end; ++position) {
      batch.token_ids.push_back(chunk.token_ids[static_cast<size_t>(position) + 1]);
      hidden_rows.push_back(chunk.first_row + position - chunk.first_position);
    }
    if (end == last) {
      batch.logit_rows.push_back(static_cast<int32_t>(batch.token_ids.size()) - 1);
      drafting.push_back(chunk.sequence_id);
    }
    seq.end_position = end;
    batch_ids.push_back(chunk.sequence_id);
    cached_tokens.push_back(chunk.token_ids);
  }
  if (batch.token_ids.empty()) return;
  std::vector<Tensor> outputs;
  const std::vector<int32_t> ids = forward(batch, hidden_states, hidden_rows, outputs, observe_steps_);
  if (!drafting.empty()) {
    for (size_t r = 0; r < drafting.size(); ++r) {
      MtpSequence& seq = sequences_.at(drafting[r]);
      seq.first_draft = ids[r];
      seq.output_row = static_cast<int32_t>(r);
    }
    last_outputs_ = outputs;
  }
  // Full blocks of computed entries go to the prefix cache, by the tokens of their positions (from position 0 on).
  for (size_t i = 0; i < batch_ids.size(); ++i) {
    MtpSequence& seq = sequences_.at(batch_ids[i]);
    if (seq.first_position == 0) kv_.cache_blocks(seq.blocks, cached_tokens[i], seq.end_position);
  }
}

DraftTokens MtpProposer::propose(std::span<const DraftRequest> requests) {
  DraftTokens drafts;
  std::unordered_set<uint64_t> busy;
  for (const auto& request : requests) busy.insert(request.sequence_id);
  // The sequences that draft more than one token, and the row of `outputs` their last draft's entry wrote.
  struct Chain {
    const DraftRequest* request;
    int32_t row;
  };
  std::vector<Chain> chains;
  for (const auto& request : requests) {
    const auto it = sequences_.find(request.sequence_id);
    // Only a sequence whose last observed step left it with the tokens it has now (the first draft is for them).
    if (it == sequences_.end() || it->second.first_draft < 0 ||
        static_cast<size_t>(it->second.end_position) + 1 != request.token_ids.size()) {
      continue;
    }
    drafts[request.sequence_id] = {it->second.first_draft};
    if (request.max_draft_tokens > 1) chains.push_back({&request, it->second.output_row});
  }
  // Draft s + 1 comes from the entry of draft s at the sequence's position end_position + s - 1, which reads the
  // layer's output at the entry before it. These entries are recomputed from the target's hidden states once the
  // drafts are verified (observe starts at end_position).
  std::vector<Tensor> outputs = last_outputs_;
  for (int32_t s = 1; !chains.empty(); ++s) {
    ForwardBatch batch;
    std::vector<int32_t> rows;
    std::vector<Chain> chained;
    for (const Chain& chain : chains) {
      MtpSequence& seq = sequences_.at(chain.request->sequence_id);
      const int32_t slot = seq.end_position + s - 1 - seq.first_position;
      // The next observe recomputes from end_position: a sliding window's blocks that its queries read stay.
      if (!allocate(seq, seq.end_position - seq.first_position, slot + 1, busy)) continue;
      batch.token_ids.push_back(drafts[chain.request->sequence_id].back());
      batch.sequences.push_back({slot, 1, seq.blocks.tables, 0});
      batch.logit_rows.push_back(static_cast<int32_t>(batch.logit_rows.size()));
      rows.push_back(chain.row);
      chained.push_back(chain);
    }
    if (chained.empty()) break;
    std::vector<Tensor> next_outputs;
    const std::vector<int32_t> ids = forward(batch, outputs, rows, next_outputs, draft_steps_);
    chains.clear();
    for (size_t i = 0; i < chained.size(); ++i) {
      std::vector<int32_t>& tokens = drafts[chained[i].request->sequence_id];
      tokens.push_back(ids[i]);
      if (static_cast<int32_t>(tokens.size()) < chained[i].request->max_draft_tokens) {
        chains.push_back({chained[i].request, static_cast<int32_t>(i)});
      }
    }
    outputs = std::move(next_outputs);
  }
  return drafts;
}

}  // namespace tern
