#pragma once
// Greedy steps of short chunks (decode steps, verify steps, a drafter's steps) as recorded graphs
// (Backend::run_recorded_step, CUDA graphs): a step is padded with sequences that write only a scratch block of its
// KV cache, up to a batch-size bucket and to a token count of the bucket times the chunks' mean length rounded up,
// so that steps of one bucket and mean length replay one recording however their tokens fall among the sequences.
// A recorder's recordings are its own (a model runner's, an MTP layer's) and go with it.
#include <cstdint>
#include <optional>
#include <vector>

#include "backend/backend.h"

namespace tern {

class StepRecorder {
 public:
  // Pads with `scratch_block` of `cache` (a block outside the pool its owner schedules) up to buckets of at most
  // `max_num_seqs` sequences. Without a scratch block (-1), or on a backend that does not record, every step runs
  // eagerly.
  StepRecorder(Backend& backend, const KvCache& cache, int32_t scratch_block, int32_t max_num_seqs);
  ~StepRecorder();
  StepRecorder(const StepRecorder&) = delete;
  StepRecorder& operator=(const StepRecorder&) = delete;

  // The tokens of the step run() would make of `unpadded` (padded to the first bucket that fits it); nullopt where
  // it has no logit rows, a chunk is too long or no bucket fits.
  std::optional<int64_t> padded_tokens(const ForwardBatch& unpadded) const;
  // `forward` over `unpadded` padded so, recorded or replayed: the outputs, whose first rows (ids, hidden states)
  // are the unpadded batch's. nullopt where it does not fit or the backend does not record (which turns recording
  // off).
  std::optional<StepOutputs> run(const ForwardBatch& unpadded, const StepForward& forward);
  // Records now the steps of every bucket whose chunks take 1 .. max_chunk_tokens tokens, with a logit row at every
  // token or, with `rows_at_last_token`, at each chunk's last. Returns the number recorded (0 where the backend
  // does not record).
  int record(int32_t max_chunk_tokens, bool rows_at_last_token, const StepForward& forward);
  // Drops the recordings, for when a tensor they read was replaced.
  void discard();
  // The largest bucket (0 where every step runs eagerly).
  int32_t max_sequences() const { return buckets_.empty() ? 0 : buckets_.back(); }
  // The steps run() ran through a recording (a first one of its shape included).
  int64_t num_recorded_runs() const { return num_recorded_runs_; }

 private:
  // The most new tokens a sequence of a recorded step may have: the backend's bound, and a scratch sequence's
  // tokens fit the scratch block.
  int64_t longest_chunk() const;
  // The bucket `unpadded` fits and the scratch tokens it takes; nullopt where none fits.
  std::optional<std::pair<int32_t, int64_t>> bucket_of(const ForwardBatch& unpadded) const;
  std::optional<StepOutputs> run_padded(ForwardBatch batch, int32_t bucket, int64_t padding, bool rows_at_every_token,
                                        const StepForward& forward);

  Backend& backend_;
  const uint64_t recorder_;  // Backend::run_recorded_step's
  int32_t scratch_block_;
  int32_t block_size_;
  size_t num_groups_;            // the cache's: a scratch sequence has a block table in each
  std::vector<int32_t> buckets_;  // ascending; empty: every step runs eagerly
  int64_t num_recorded_runs_ = 0;
};

}  // namespace tern
