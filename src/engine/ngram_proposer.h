#pragma once
// Prompt lookup decoding (vLLM's "ngram" method): the sequence's last n tokens, for n from prompt_lookup_max down
// to prompt_lookup_min, are looked up among its earlier tokens; the tokens that followed the latest earlier match
// are the drafts (repeated past the sequence's end). No model: it pays where outputs repeat their input (editing
// code, quoting a document). Past a token in flight (overlap scheduling) the lookup's first token stands for that
// token and the drafts are the rest: where the guess is wrong the target rejects them, as any wrong draft.
#include <cstdint>
#include <span>
#include <vector>

#include "engine/draft_proposer.h"

namespace tern {

// `max_tokens` tokens that followed the latest earlier occurrence of the longest suffix of `tokens` of [min_n, max_n]
// tokens, those past the end of `tokens` repeating the ones after that occurrence (the text repeating itself); empty
// when none occurs. (vLLM's lookup stops at the end instead, which leaves a sequence that repeats one token or a
// short phrase with one or two drafts.)
std::vector<int32_t> ngram_lookup(std::span<const int32_t> tokens, int32_t min_n, int32_t max_n, int32_t max_tokens);

class NgramProposer : public DraftProposer {
 public:
  NgramProposer(int32_t min_n, int32_t max_n);
  DraftTokens propose(std::span<const DraftRequest> requests) override;
  bool drafts_past_token_in_flight() const override { return true; }

 private:
  int32_t min_n_;
  int32_t max_n_;
};

}  // namespace tern
