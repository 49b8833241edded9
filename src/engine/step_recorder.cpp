#include "engine/step_recorder.h"

#include <atomic>

#include "core/error.h"

namespace tern {

namespace {

// vLLM's capture sizes, thinned: padding a decode batch costs little (its GEMMs are bound by weight reads), each
// bucket costs a recording.
constexpr int32_t kBuckets[] = {1, 2, 4, 8, 16, 24, 32, 48, 64, 80, 96, 128, 160, 192, 224, 256, 320, 384, 448, 512};

// Recorder ids are never reused, so a recorder made where a destroyed one was never meets that one's recordings.
std::atomic<uint64_t> next_recorder{1};

}  // namespace

StepRecorder::StepRecorder(Backend& backend, const KvCache& cache, int32_t scratch_block, int32_t max_num_seqs)
    : backend_(backend),
      recorder_(next_recorder++),
      scratch_block_(scratch_block),
      block_size_(cache.block_size),
      num_groups_(cache.groups.size()) {
  if (scratch_block_ < 0) return;
  if (scratch_block_ >= cache.num_blocks) {
    fail("recorded steps: scratch block {} outside the cache's {} blocks", scratch_block_, cache.num_blocks);
  }
  for (int32_t bucket : kBuckets) {
    if (bucket <= max_num_seqs) buckets_.push_back(bucket);
  }
}

// Its recordings read its owner's KV cache, which goes with it.
StepRecorder::~StepRecorder() { discard(); }

void StepRecorder::discard() { backend_.discard_recorded_steps(recorder_); }

int64_t StepRecorder::longest_chunk() const {
  return std::min<int64_t>(backend_.max_recorded_chunk_tokens(), block_size_);
}

std::optional<std::pair<int32_t, int64_t>> StepRecorder::bucket_of(const ForwardBatch& unpadded) const {
  if (buckets_.empty() || unpadded.logit_rows.empty()) return std::nullopt;
  const int64_t longest = longest_chunk();
  for (const auto& seq : unpadded.sequences) {
    if (seq.num_new_tokens > longest) return std::nullopt;
  }
  const auto num_seqs = static_cast<int64_t>(unpadded.sequences.size());
  const int64_t num_tokens = unpadded.num_tokens();
  const int64_t tokens_per_seq = (num_tokens + num_seqs - 1) / num_seqs;
  for (int32_t bucket : buckets_) {
    const int64_t num_scratch = bucket - num_seqs;
    if (num_scratch < 0) continue;
    const int64_t padding = bucket * tokens_per_seq - num_tokens;
    // Every scratch sequence takes at least one token and at most a chunk's worth.
    const bool fits = num_scratch == 0 ? padding == 0 : padding >= num_scratch && padding <= num_scratch * longest;
    if (fits) return std::pair{bucket, padding};
  }
  return std::nullopt;
}

std::optional<int64_t> StepRecorder::padded_tokens(const ForwardBatch& unpadded) const {
  const auto bucket = bucket_of(unpadded);
  if (!bucket) return std::nullopt;
  return unpadded.num_tokens() + bucket->second;
}

std::optional<StepOutputs> StepRecorder::run(const ForwardBatch& unpadded, const StepForward& forward) {
  const auto bucket = bucket_of(unpadded);
  if (!bucket) return std::nullopt;
  auto outputs = run_padded(unpadded, bucket->first, bucket->second, logit_rows_are_tokens(unpadded), forward);
  if (outputs) ++num_recorded_runs_;
  return outputs;
}

std::optional<StepOutputs> StepRecorder::run_padded(ForwardBatch batch, int32_t bucket, int64_t padding,
                                                    bool rows_at_every_token, const StepForward& forward) {
  const int64_t num_scratch = bucket - static_cast<int64_t>(batch.sequences.size());
  for (int64_t i = 0; i < num_scratch; ++i) {
    const auto length = static_cast<int32_t>(padding / num_scratch + (i < padding % num_scratch ? 1 : 0));
    const auto first = static_cast<int32_t>(batch.token_ids.size());
    batch.token_ids.insert(batch.token_ids.end(), static_cast<size_t>(length), 0);
    for (int32_t row = rows_at_every_token ? first : first + length - 1; row < first + length; ++row) {
      batch.logit_rows.push_back(row);
    }
    batch.sequences.push_back({0, length, std::vector<std::vector<int32_t>>(num_groups_, {scratch_block_})});
  }
  auto outputs = backend_.run_recorded_step(batch, forward, recorder_);
  if (!outputs) buckets_.clear();  // the backend does not record: every step runs eagerly
  return outputs;
}

int StepRecorder::record(int32_t max_chunk_tokens, bool rows_at_last_token, const StepForward& forward) {
  const int64_t longest = std::min<int64_t>(max_chunk_tokens, longest_chunk());
  int recorded = 0;
  for (int32_t bucket : buckets_) {
    for (int64_t chunk_tokens = 1; chunk_tokens <= longest; ++chunk_tokens) {
      if (!run_padded(ForwardBatch{}, bucket, bucket * chunk_tokens, !rows_at_last_token, forward)) return 0;
      ++recorded;
    }
  }
  return recorded;
}

}  // namespace tern
