#pragma once
// One sequence's sampler: logits processors (logit_bias, repetition/frequency/presence penalties, temperature,
// top-k, top-p, min-p) and a random generator of its own, so a seeded sequence draws the same tokens whatever
// else shares its batch. Runs on host logits. A constrained sequence (SamplingParams::constraint) also keeps a
// grammar matcher: the mask of allowed tokens goes on the logits before anything else (so penalties, temperature,
// top-k/p and logprobs all see the masked logits, as in vLLM) and the matcher advances with every token. Where the
// constraint starts after the reasoning (SamplingParams::constraint_after), the grammar waits: no mask and no
// matcher step until the output has written the end-of-reasoning marker (vLLM's StructuredOutputManager
// should_fill_bitmask / should_advance, vllm/v1/structured_output/__init__.py; SGLang's ReasonerGrammarObject).
#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"
#include "engine/reasoning_end_detector.h"
#include "engine/request.h"
#include "engine/sampling_params.h"
#include "grammar/grammar_matcher.h"

namespace tern {

struct SampleOutcome {
  int32_t token_id = 0;
  std::optional<TokenLogprob> logprob;
};

class SequenceSampler {
 public:
  SequenceSampler(SamplingParams params, uint64_t seed, std::span<const int32_t> prompt_token_ids);

  // Picks the next token from `logits` ([vocab], processed in place) and remembers it for the penalties (and
  // advances the grammar matcher).
  SampleOutcome sample(std::span<float> logits);
  // Speculative verification. `logits` holds draft_ids.size() + 1 rows of the vocabulary (processed in place), row
  // i the target's logits after the sequence and drafts [0, i). Keeps drafts while the target agrees (greedy: its
  // argmax is the draft; sampled: rejection sampling of a point-mass draft, rejection_sampler.h) and ends with one
  // token of the target's own, at the first rejection or after the last draft. Each token is recorded before the
  // next row is processed, so that penalties, the grammar mask and the random draws of row i see what one token
  // per step would have: greedy outputs are those of decoding without drafts, sampled ones follow the same law.
  std::vector<SampleOutcome> verify(std::span<float> logits, std::span<const int32_t> draft_ids);
  // Records a token picked elsewhere (the backend's argmax on the greedy fast path).
  void record(int32_t token_id);
  // True when sampling is a plain argmax of the raw logits (no processors, no logprobs, no constraint).
  bool is_plain_greedy() const;
  // True when a backend can sample this sequence on the device (temperature, top-k, top-p only: no penalties,
  // bias, min-p, logprobs or constraint, which need the host).
  bool samples_on_device() const;

  // A constrained sequence samples on the host from its first token, also while its grammar waits for the end of
  // the reasoning: the token that ends it may be the one in flight when the next step is planned, and that step
  // must already be masked.
  bool is_constrained() const { return matcher_ != nullptr; }
  // True once the grammar applies: from the first token, or from the token after the end-of-reasoning marker.
  bool grammar_applies() const { return matcher_ != nullptr && !reasoning_end_; }
  // Computes the mask of the tokens the grammar allows next, if it is not computed yet. Touches only this
  // sampler, so the masks of different sequences can be prepared on different threads (while the device runs the
  // step); sample() prepares it itself otherwise.
  void prepare_mask();
  // The prepared mask: bit id%32 of word id/32 (grammar vocabulary words); ids past the grammar's vocabulary are
  // never allowed.
  std::span<const uint32_t> allowed_tokens() const { return mask_; }
  const grammar::GrammarMatcher* matcher() const { return matcher_.get(); }
  // The row's parameters for the device, with its random draw from this sequence's generator; with `draft_id`
  // >= 0, a row that verifies that draft on the device (its acceptance draw first, then the residual's).
  RowSampling device_row(int32_t draft_id = -1);

 private:
  void apply_penalties(std::span<float> logits) const;
  void apply_mask(std::span<float> logits);
  int32_t draw(std::span<const float> scaled_logits);
  double uniform();

  SamplingParams params_;
  std::mt19937_64 rng_;
  std::vector<int32_t> prompt_token_ids_;  // sorted, unique
  std::unordered_map<int32_t, int32_t> output_counts_;
  std::unique_ptr<grammar::GrammarMatcher> matcher_;
  // Watches for the end of the reasoning while the grammar waits for it; reset once it has ended.
  std::optional<ReasoningEndDetector> reasoning_end_;
  std::vector<uint32_t> mask_;
  bool mask_ready_ = false;
};

// The distribution a non-greedy sampler draws from, over the whole vocabulary (zeros for filtered tokens), given
// logits that already carry penalties and bias. Exposed so that tests can compare it with the definitions.
std::vector<double> sampling_distribution(std::span<const float> logits, const SamplingParams& params);

// A seed for the index-th sequence of a request seeded with `seed` (SplitMix64 of both).
uint64_t derive_seed(uint64_t seed, uint64_t index);

}  // namespace tern
