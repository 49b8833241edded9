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
      // The match says the text goes on as it did after `start`, so past the sequence's end the continuation
      // repeats with the distance between the two occurrences as its period.
      const int64_t from = start + n;
      const int64_t period = len - from;
      std::vector<int32_t> continuation(static_cast<size_t>(std::max(max_tokens, 0)));
      for (int64_t i = 0; i < static_cast<int64_t>(continuation.size()); ++i) {
        continuation[static_cast<size_t>(i)] = tokens[static_cast<size_t>(from + i % period)];
      }
      return continuation;
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
    const int32_t skipped = request.next_token_in_flight ? 1 : 0;
    auto tokens = ngram_lookup(request.token_ids, min_n_, max_n_, request.max_draft_tokens + skipped);
    if (static_cast<int32_t>(tokens.size()) <= skipped) continue;
    tokens.erase(tokens.begin(), tokens.begin() + skipped);
    drafts.emplace(request.sequence_id, std::move(tokens));
  }
  return drafts;
}

}  // namespace tern
