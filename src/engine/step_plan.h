#pragma once
// The two plain-data messages between the scheduler and the model runner: what to compute this step (StepPlan)
// and what came out (StepResult). The scheduler never touches device memory; the runner keeps per-sequence
// sampling state, told about sequences as they appear and disappear (the diffs of vLLM v1).
#include <cstdint>
#include <optional>
#include <vector>

#include "engine/request.h"
#include "engine/sampling_params.h"
#include "kvcache/kv_tier_copy.h"

namespace tern {

// The id of a token the previous step is still sampling (overlap scheduling): only ever the last token of a chunk
// before its drafts, and the model runner takes the id from that step's sampled ids on the device.
constexpr int32_t kTokenInFlight = -1;

struct ScheduledChunk {
  uint64_t sequence_id = 0;
  int32_t num_cached_tokens = 0;      // tokens whose KV is already in the cache
  std::vector<int32_t> token_ids;     // the tokens computed this step; the last before the drafts may be kTokenInFlight
  std::vector<std::vector<int32_t>> block_tables;  // per KV cache group: blocks covering cached + new tokens
  bool sample = false;                // the chunk reaches the end of the sequence: sample its next token
  // Speculative decoding: the last num_draft_tokens of token_ids are drafts after the sequence's last token. The
  // runner computes logits for the last num_draft_tokens + 1 positions and the sampler keeps a prefix of the drafts.
  int32_t num_draft_tokens = 0;
  int32_t num_prompt_tokens = 0;      // the sequence's prompt length (some models' outputs depend on it)
  int32_t rank = 0;  // the data-parallel rank that runs the chunk, whose KV cache block_tables index
};

// A sequence the runner has not seen: what its sampler needs.
struct NewSequence {
  uint64_t sequence_id = 0;
  SamplingParams sampling;
  uint64_t seed = 0;
  std::vector<int32_t> prompt_token_ids;  // for the repetition penalty
};

struct StepPlan {
  uint64_t step = 0;
  std::vector<NewSequence> new_sequences;
  std::vector<uint64_t> finished_sequence_ids;  // the runner drops their state
  std::vector<ScheduledChunk> chunks;
  // Per KV cache manager (one, or one per data-parallel rank): copies between its device pool and host tier, to
  // run in order before the step's compute (empty without a host tier).
  std::vector<std::vector<KvTierCopy>> kv_tier_copies;

  int64_t num_tokens() const {
    int64_t total = 0;
    for (const auto& chunk : chunks) total += static_cast<int64_t>(chunk.token_ids.size());
    return total;
  }
};

struct SampledToken {
  uint64_t sequence_id = 0;
  int32_t token_id = 0;
  std::optional<TokenLogprob> logprob;
};

struct StepResult {
  // In chunk order, for each chunk with `sample`: one token, or for a chunk with drafts the drafts kept and the
  // sampler's own token after them (1 to num_draft_tokens + 1 tokens).
  std::vector<SampledToken> tokens;
};

}  // namespace tern
