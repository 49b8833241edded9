#pragma once
// Multi-token prediction drafts (vLLM's "deepseek_mtp" method): the target checkpoint's MTP layer (mtp_model.h)
// drafts k tokens greedily from the target's hidden states. EAGLE-3 drafts ("eagle3") run here too: an EAGLE-3 head
// is such a layer (model/arch/llama_eagle3.h) that reads three of the target's layer inputs instead and maps its
// drafts from its own vocabulary to the target's. Its entry at position i pairs token i + 1 with the
// target's hidden state at i; after each target step the layer computes the entries of the positions the step
// made final (the chunk's rows before the sequence's last token: those of accepted drafts, not of rejected ones),
// the last of which predicts the first draft. Drafts after it chain through the layer's own output, one forward
// per draft, all sequences batched (as vLLM's and SGLang's proposers do).
// The layer has its own KV cache and block bookkeeping, as many blocks as the target's pool. Chained entries are
// written past the computed ones and recomputed from target hidden states after the verify step. Its prefix cache
// (when the engine's is on) holds full blocks of computed entries by the target's tokens, so a sequence whose
// prompt the target takes from its prefix cache finds the layer's entries there too (an entry also depends on the
// token after it: the last entry of a matched block may have been computed for another continuation, which only
// changes a draft). Where the layer lacks the entries before the target's first computed position (its cache
// evicted them, or it dropped the sequence for room), its context starts at that position: slot s of its cache
// holds position first_position + s, and RoPE, which sees only position differences, is run at the slots.
// Under tensor parallelism the layer is loaded on every rank (its decoder layer sharded like the target's, the rest
// whole), every rank runs every forward of it on its own copy of the target's hidden states, and the first rank
// reads the drafts back (the ranks' logits are the same).
// On a device backend the layer's steps of short chunks replay recorded graphs (StepRecorder, padded with a scratch
// block past its pool): the steps after a target step and the chained draft steps apart, as their inputs may differ
// in width (EAGLE-3 reads three target layers, then its own output). A recording reads its input where it found it,
// so each kind of step gathers its input rows into a buffer of its own first (allocated at the first recorded step,
// when the inputs' dtype and width are known).
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "backend/backend.h"
#include "engine/draft_proposer.h"
#include "engine/sharded_model.h"
#include "engine/step_recorder.h"
#include "kvcache/kv_cache_manager.h"
#include "model/mtp_model.h"

namespace tern {

class MtpProposer final : public DraftProposer {
 public:
  // models[r]: the layer on the backend of the target's rank r (`ranks`, whose threads run it). `num_blocks`
  // blocks of `block_size` tokens for the layer's cache on each rank, stored as `kv_dtype`, up to
  // `num_speculative_tokens` drafts a sequence. With `max_num_seqs` > 0, one more block pads its steps to recorded
  // batch sizes.
  MtpProposer(ShardedModel& ranks, std::vector<std::unique_ptr<MtpModel>> models, int32_t num_blocks,
              int32_t block_size, bool enable_prefix_cache, int32_t num_speculative_tokens, int32_t max_num_seqs = 0,
              KvCacheDtype kv_dtype = KvCacheDtype::automatic);
  DraftTokens propose(std::span<const DraftRequest> requests) override;
  void forget(std::span<const uint64_t> sequence_ids) override;
  bool reads_hidden_states() const override { return true; }
  std::vector<int32_t> target_layer_inputs() const override { return models_[0]->target_layer_inputs(); }
  void observe(std::span<const ComputedChunk> chunks, std::span<const Tensor> hidden_states) override;
  // The layer's steps that ran through recordings (the first rank's).
  int64_t num_recorded_steps() const;

 private:
  struct MtpSequence {
    SequenceBlocks blocks;
    // The cache holds the entries of positions [first_position, end_position), slot s the entry of position
    // first_position + s.
    int32_t first_position = 0;
    int32_t end_position = 0;
    // From the entry of position end_position - 1, for a sequence of end_position + 1 tokens: the first draft and
    // row `output_row` of last_outputs_, the layer's output there; -1 when the last observe made none (a sequence
    // the last step did not compute drafts one token later).
    int32_t first_draft = -1;
    int32_t output_row = -1;
  };

  // Blocks for slots [num_computed, num_slots) of `seq`; where the pool is short, the sequences not in `busy` give
  // theirs back first. False when it still does not fit.
  bool allocate(MtpSequence& seq, int64_t num_computed, int64_t num_slots, const std::unordered_set<uint64_t>& busy);
  // A sequence the layer has no entries before `position` for, starting there (or from the prefix cache's entries
  // of `token_ids` up to it, where they are all there).
  void start_at(MtpSequence& seq, int32_t position, std::span<const int32_t> token_ids);
  void drop(uint64_t sequence_id);
  // One kind of the layer's steps as recordings, on each rank: its recorder, and the input its recordings read
  // ([capacity, width], empty until the first recorded step).
  struct RecordedSteps {
    std::vector<std::unique_ptr<StepRecorder>> recorders;
    std::vector<Tensor> inputs;
    int64_t capacity = 0;
  };

  // The layer's forward over `batch` on every rank, reading rows `rows` of inputs[rank] (the target's hidden
  // states or the layer's own outputs), its outputs into outputs[rank], through `recorded` where the step fits;
  // the target's ids of the argmax of each logit row, from the first rank.
  std::vector<int32_t> forward(const ForwardBatch& batch, std::span<const Tensor> inputs,
                               const std::vector<int32_t>& rows, std::vector<Tensor>& outputs,
                               RecordedSteps& recorded);
  // forward on `rank` through a recording; nullopt where the step does not fit one.
  std::optional<StepOutputs> run_recorded(int rank, const ForwardBatch& batch, const Tensor& input,
                                          const std::vector<int32_t>& rows, RecordedSteps& recorded);

  ShardedModel& ranks_;
  std::vector<std::unique_ptr<MtpModel>> models_;
  KvCacheManager kv_;
  std::vector<KvCache> caches_;
  RecordedSteps observe_steps_;  // the entries a target step made final
  RecordedSteps draft_steps_;    // chained drafts
  std::unordered_map<uint64_t, MtpSequence> sequences_;
  // Each rank's [R, hidden]: the layer's outputs at the first drafts' entries of the last observe.
  std::vector<Tensor> last_outputs_;
};

}  // namespace tern
