#pragma once
// A draft model (vLLM's "draft_model" method): a smaller model with the target's vocabulary drafts k tokens
// greedily, one forward per token after a first one that catches its cache up with the sequence. It runs through a
// ModelRunner of its own over a KV cache of its own, with its own block bookkeeping (no prefix cache: its blocks
// live as long as the sequence decodes). What it cached past a rejected draft is recomputed: its cache is trusted
// only for the longest common prefix of the tokens it computed and the sequence's tokens now. The k forwards are
// launched back to back, each taking the draft the one before sampled on the device (tokens in flight), and read
// back once; on a device backend they replay recorded graphs. Under tensor parallelism the draft model is sharded
// like the target (each rank its shard on its own backend) and every rank runs every draft forward, meeting in
// the draft's collectives; the first rank reads the drafts back, the others keep theirs on the device for the
// tokens in flight (their logits, gathered whole, are the same).
#include <cstdint>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"
#include "engine/draft_proposer.h"
#include "engine/model_runner.h"
#include "engine/sharded_model.h"
#include "kvcache/kv_cache_manager.h"
#include "model/model.h"

namespace tern {

class DraftModelProposer : public DraftProposer {
 public:
  // models[r]: the draft on the backend of the target's rank r (`ranks`, whose threads run it). `num_blocks` blocks
  // of `block_size` tokens for the draft's cache on each rank, up to `num_speculative_tokens` drafts a sequence.
  // With `max_num_seqs` > 0, one more block pads its steps to recorded batch sizes (ModelRunner's scratch block),
  // recorded at once.
  DraftModelProposer(ShardedModel& ranks, std::vector<std::unique_ptr<Model>> models, int32_t num_blocks,
                     int32_t block_size, int32_t num_speculative_tokens, int32_t max_num_seqs = 0,
                     KvCacheDtype kv_dtype = KvCacheDtype::automatic);
  DraftTokens propose(std::span<const DraftRequest> requests) override;
  void forget(std::span<const uint64_t> sequence_ids) override;

 private:
  struct DraftSequence {
    SequenceBlocks blocks;
    std::vector<int32_t> computed_token_ids;  // the tokens whose KV the draft cache holds, in order
  };

  // Blocks for the sequence's tokens [num_computed, num_tokens); where the pool is short, the sequences that take no
  // drafts this step (`requests`) give theirs back first. False when it still does not fit.
  bool allocate(DraftSequence& seq, int64_t num_computed, int64_t num_tokens, std::span<const DraftRequest> requests);
  void drop(uint64_t sequence_id);
  // The plan's forward on every rank, launched; then the first rank's drafts.
  std::vector<PendingStep> launch(const StepPlan& plan);
  StepResult finish(std::vector<PendingStep> step);

  ShardedModel& ranks_;
  std::vector<std::unique_ptr<Model>> models_;
  KvCacheManager kv_;
  std::vector<std::unique_ptr<ModelRunner>> runners_;
  bool has_sliding_window_ = false;
  std::unordered_map<uint64_t, DraftSequence> sequences_;
  std::vector<uint64_t> dropped_;  // told to the runner with its next plan
};

}  // namespace tern
