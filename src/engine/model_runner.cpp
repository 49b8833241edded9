#include "engine/model_runner.h"

#include <algorithm>
#include <atomic>
#include <future>
#include <thread>

#include "core/error.h"

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
                         bool samples_tokens)
    : model_(model),
      backend_(backend),
      cache_(std::move(cache)),
      scratch_block_(scratch_block),
      samples_tokens_(samples_tokens) {
  if (scratch_block_ < 0) return;
  if (scratch_block_ >= cache_.num_blocks) {
    fail("model runner: scratch block {} outside the cache's {} blocks", scratch_block_, cache_.num_blocks);
  }
  for (int32_t bucket : kDecodeBuckets) {
    if (bucket <= max_num_seqs) decode_buckets_.push_back(bucket);
  }
}

int32_t ModelRunner::bucket_for(size_t num_seqs) const {
  for (int32_t bucket : decode_buckets_) {
    if (static_cast<size_t>(bucket) >= num_seqs) return bucket;
  }
  return 0;
}

std::optional<std::vector<int32_t>> ModelRunner::run_recorded_decode(const ForwardBatch& unpadded,
                                                                    int32_t bucket) {
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
    batch.sequences.push_back({chunk.num_cached_tokens, static_cast<int32_t>(chunk.token_ids.size()), chunk.block_tables,
                               chunk.num_prompt_tokens});
    if (!chunk.sample) continue;
    const auto it = samplers_.find(chunk.sequence_id);
    if (it == samplers_.end()) fail("model runner: sequence {} was scheduled before it was announced", chunk.sequence_id);
    batch.logit_rows.push_back(static_cast<int32_t>(batch.token_ids.size() - 1));
    row_samplers.push_back(&it->second);
    all_plain_greedy = all_plain_greedy && it->second.is_plain_greedy();
  }

  // Greedy decode steps: a recorded graph per batch-size bucket; only the ids come back.
  const bool all_decode = std::all_of(plan.chunks.begin(), plan.chunks.end(), [](const ScheduledChunk& chunk) {
    return chunk.sample && chunk.token_ids.size() == 1;
  });
  const int32_t bucket = all_plain_greedy && all_decode ? bucket_for(plan.chunks.size()) : 0;
  if (bucket > 0) {
    const size_t num_rows = batch.logit_rows.size();
    if (auto ids = run_recorded_decode(batch, bucket)) {
      if (!samples_tokens_) return result;
      ids->resize(num_rows);  // the padding's ids go
      for (size_t r = 0; r < num_rows; ++r) {
        row_samplers[r]->record((*ids)[r]);
        result.tokens.push_back({plan.chunks[r].sequence_id, (*ids)[r], std::nullopt});
      }
      return result;
    }
  }

  std::vector<SequenceSampler*> constrained;
  for (SequenceSampler* sampler : row_samplers) {
    if (samples_tokens_ && sampler->is_constrained()) constrained.push_back(sampler);
  }
  std::future<void> masks = prepare_masks_async(std::move(constrained));

  const auto step = backend_.begin_step(batch);
  const Tensor logits = model_.forward(*step, cache_);
  if (masks.valid()) masks.get();
  if (row_samplers.empty() || !samples_tokens_) return result;

  std::vector<int32_t> sequence_of_row;
  for (const auto& chunk : plan.chunks) {
    if (chunk.sample) sequence_of_row.push_back(static_cast<int32_t>(&chunk - plan.chunks.data()));
  }
  result.tokens.reserve(row_samplers.size());
  const size_t num_rows = row_samplers.size();
  // Rows whose logits must come to the host: processors the device lacks, logprobs, or a grammar mask.
  std::vector<bool> on_host(num_rows);
  size_t num_host_rows = 0;
  bool device_rows_plain_greedy = true;
  for (size_t r = 0; r < num_rows; ++r) {
    const SequenceSampler& sampler = *row_samplers[r];
    on_host[r] = !sampler.is_plain_greedy() && !(backend_.samples_on_device() && sampler.samples_on_device());
    num_host_rows += on_host[r];
    if (!on_host[r]) device_rows_plain_greedy = device_rows_plain_greedy && sampler.is_plain_greedy();
  }
  std::vector<int32_t> ids(num_rows, 0);
  std::vector<std::optional<TokenLogprob>> logprobs(num_rows);
  if (num_host_rows < num_rows) {
    // Only the ids leave the device: an argmax when every such row is greedy, else the device's sampler (host
    // rows ride along as greedy rows whose ids are dropped).
    std::vector<int32_t> device_ids;
    if (device_rows_plain_greedy) {
      device_ids = backend_.to_host_i32(backend_.argmax(logits));
    } else {
      std::vector<RowSampling> rows(num_rows);
      for (size_t r = 0; r < num_rows; ++r) {
        if (on_host[r]) rows[r].temperature = 0.0f;
        else rows[r] = row_samplers[r]->device_row();
      }
      device_ids = backend_.to_host_i32(*backend_.sample(logits, rows));
    }
    for (size_t r = 0; r < num_rows; ++r) {
      if (on_host[r]) continue;
      ids[r] = device_ids[r];
      row_samplers[r]->record(ids[r]);
    }
  }
  if (num_host_rows > 0) {
    std::vector<float> host = backend_.to_host_f32(logits);
    const size_t vocab = host.size() / num_rows;
    for (size_t r = 0; r < num_rows; ++r) {
      if (!on_host[r]) continue;
      auto outcome = row_samplers[r]->sample(std::span<float>(host.data() + r * vocab, vocab));
      ids[r] = outcome.token_id;
      logprobs[r] = std::move(outcome.logprob);
    }
  }
  for (size_t r = 0; r < num_rows; ++r) {
    result.tokens.push_back({plan.chunks[sequence_of_row[r]].sequence_id, ids[r], std::move(logprobs[r])});
  }
  return result;
}

}  // namespace tern
