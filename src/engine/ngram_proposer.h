#pragma once
// Prompt lookup decoding (vLLM's "ngram" method): the sequence's last n tokens, for n from prompt_lookup_max down
// to prompt_lookup_min, are looked up among its earlier tokens; the tokens that followed the latest earlier match
// are the drafts. No model: it pays where outputs repeat their input (editing code, quoting a document).
#include <cstdint>
#include <span>
#include <vector>

#include "engine/draft_proposer.h"

namespace tern {

// Up to `max_tokens` tokens that followed the latest earlier occurrence of the longest suffix of `tokens` of
// [min_n, max_n] tokens; empty when none occurs.
std::vector<int32_t> ngram_lookup(std::span<const int32_t> tokens, int32_t min_n, int32_t max_n, int32_t max_tokens);

class NgramProposer : public DraftProposer {
 public:
  NgramProposer(int32_t min_n, int32_t max_n);
  DraftTokens propose(std::span<const DraftRequest> requests) override;

 private:
  int32_t min_n_;
  int32_t max_n_;
};

}  // namespace tern
