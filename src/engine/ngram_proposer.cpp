#include "engine/ngram_proposer.h"

#include <algorithm>

#include "core/error.h"

namespace tern {

std::vector<int32_t> ngram_lookup(std::span<const int32_t> tokens, int32_t min_n, int32_t max_n, int32_t max_tokens) {
  const auto len = static_cast<int64_t>(tokens.size());
  for (int64_t n = std::min<int64_t>(max_n, len - 1); n >= min_n; --n) {
    const auto suffix = tokens.subspan(static_cast<size_t>(len - n));
    // Latest first: the most recent context is the likeliest to continue the same way.
    for (int64_t start = len - n - 1; start >= 0; --start) {
      if (!std::equal(suffix.begin(), suffix.end(), tokens.begin() + start)) continue;
      const int64_t from = start + n;
      const int64_t count = std::min<int64_t>(max_tokens, len - from);
      return {tokens.begin() + from, tokens.begin() + from + count};
    }
  }
  return {};
}

NgramProposer::NgramProposer(int32_t min_n, int32_t max_n) : min_n_(min_n), max_n_(max_n) {
  if (min_n < 1 || max_n < min_n) fail("ngram proposer: n-gram sizes [{}, {}] must satisfy 1 <= min <= max", min_n, max_n);
}

DraftTokens NgramProposer::propose(std::span<const DraftRequest> requests) {
  DraftTokens drafts;
  for (const auto& request : requests) {
    auto tokens = ngram_lookup(request.token_ids, min_n_, max_n_, request.max_draft_tokens);
    if (!tokens.empty()) drafts.emplace(request.sequence_id, std::move(tokens));
  }
  return drafts;
}

}  // namespace tern
