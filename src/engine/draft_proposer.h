#pragma once
// The seam between speculative decoding and whatever drafts the tokens: before each step the engine asks a
// proposer for up to k tokens per decoding sequence, the scheduler gives each such sequence 1 + k tokens, the
// sampler accepts a prefix of them (engine/rejection_sampler.h). Proposers here draft point masses (the draft
// token is certain given the sequence), which rejection sampling verifies exactly; a proposer with a draft
// distribution (EAGLE-3's sampled drafts, DSpark's Markov head) would return it beside its tokens.
// A proposer that drafts from the target's hidden states (MTP, EAGLE-3) also observes each step the target ran.
#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "backend/tensor.h"

namespace tern {

// One decoding sequence that may take drafts this step.
struct DraftRequest {
  uint64_t sequence_id = 0;
  std::span<const int32_t> token_ids;  // prompt and output so far, the last not yet computed
  int32_t num_prompt_tokens = 0;
  int32_t max_draft_tokens = 0;  // >= 1: the proposer's k, bounded by what the sequence may still generate
  // Overlap scheduling: the step in flight is sampling one more token, unknown to the host, after token_ids. The
  // drafts go after that token (only proposers with drafts_past_token_in_flight() get such requests).
  bool next_token_in_flight = false;
};

// Draft tokens by sequence id; a sequence left out (or given none) decodes one token.
using DraftTokens = std::unordered_map<uint64_t, std::vector<int32_t>>;

// One chunk of a step the target computed, as a proposer reading the target's hidden states sees it.
struct ComputedChunk {
  uint64_t sequence_id = 0;
  int32_t first_position = 0;  // of the chunk's first token
  // The chunk's tokens, drafts included; their hidden states are rows [first_row, first_row + num_tokens).
  int32_t num_tokens = 0;
  int32_t first_row = 0;
  // The sequence's tokens once the step is applied (prompt and output), empty when it finished. The chunk's rows
  // of positions before the last of them are hidden states of these tokens; rows past them, of rejected drafts.
  std::span<const int32_t> token_ids;
};

class DraftProposer {
 public:
  virtual ~DraftProposer() = default;
  virtual DraftTokens propose(std::span<const DraftRequest> requests) = 0;
  // Whether propose() drafts after a token in flight (DraftRequest::next_token_in_flight), so that the overlap
  // scheduler may launch a verify step before it applies the step in flight. Without, the engine applies that step
  // before each proposal: its drafts need every token.
  virtual bool drafts_past_token_in_flight() const { return false; }
  // Drops what the proposer keeps for sequences that have finished.
  virtual void forget(std::span<const uint64_t> sequence_ids) { (void)sequence_ids; }
  // Whether observe() reads the target's hidden states (Model::forward_with_hidden_states), which cost the target a
  // final norm over every token of a step and its recorded decode steps.
  virtual bool reads_hidden_states() const { return false; }
  // Where not empty, the target layers whose inputs observe() reads instead, side by side
  // (Model::forward_with_layer_inputs; an EAGLE-3 head's three).
  virtual std::vector<int32_t> target_layer_inputs() const { return {}; }
  // After each step the target ran and the scheduler applied: the step's chunks and the target's hidden states
  // [step tokens, hidden] (or its layer inputs [step tokens, layers * hidden]), chunks back to back in plan order:
  // each tensor-parallel rank's in its backend's memory (the same values on every rank), the first rank's first.
  virtual void observe(std::span<const ComputedChunk> chunks, std::span<const Tensor> hidden_states) {
    (void)chunks, (void)hidden_states;
  }
};

}  // namespace tern
