#pragma once
// The seam between speculative decoding and whatever drafts the tokens: before each step the engine asks a
// proposer for up to k tokens per decoding sequence, the scheduler gives each such sequence 1 + k tokens, the
// sampler accepts a prefix of them (engine/rejection_sampler.h). Proposers here draft point masses (the draft
// token is certain given the sequence), which rejection sampling verifies exactly; a proposer with a draft
// distribution (MTP, EAGLE-3, DSpark's Markov head) would return it beside its tokens.
#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

namespace tern {

// One decoding sequence that may take drafts this step.
struct DraftRequest {
  uint64_t sequence_id = 0;
  std::span<const int32_t> token_ids;  // prompt and output so far, the last not yet computed
  int32_t num_prompt_tokens = 0;
  int32_t max_draft_tokens = 0;  // >= 1: the proposer's k, bounded by what the sequence may still generate
};

// Draft tokens by sequence id; a sequence left out (or given none) decodes one token.
using DraftTokens = std::unordered_map<uint64_t, std::vector<int32_t>>;

class DraftProposer {
 public:
  virtual ~DraftProposer() = default;
  virtual DraftTokens propose(std::span<const DraftRequest> requests) = 0;
  // Drops what the proposer keeps for sequences that have finished.
  virtual void forget(std::span<const uint64_t> sequence_ids) { (void)sequence_ids; }
};

}  // namespace tern
