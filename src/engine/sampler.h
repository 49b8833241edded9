#pragma once
// One sequence's sampler: logits processors (logit_bias, repetition/frequency/presence penalties, temperature,
// top-k, top-p, min-p) and a random generator of its own, so a seeded sequence draws the same tokens whatever
// else shares its batch. Runs on host logits. A constrained sequence (SamplingParams::constraint) also keeps a
// grammar matcher: the mask of allowed tokens goes on the logits before anything else (so penalties, temperature,
// top-k/p and logprobs all see the masked logits, as in vLLM) and the matcher advances with every token.
#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"
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
  // Records a token picked elsewhere (the backend's argmax on the greedy fast path).
  void record(int32_t token_id);
  // True when sampling is a plain argmax of the raw logits (no processors, no logprobs, no constraint).
  bool is_plain_greedy() const;
  // True when a backend can sample this sequence on the device (temperature, top-k, top-p only: no penalties,
  // bias, min-p, logprobs or constraint, which need the host).
  bool samples_on_device() const;

  bool is_constrained() const { return matcher_ != nullptr; }
  // Computes the mask of the tokens the grammar allows next, if it is not computed yet. Touches only this
  // sampler, so the masks of different sequences can be prepared on different threads (while the device runs the
  // step); sample() prepares it itself otherwise.
  void prepare_mask();
  // The prepared mask: bit id%32 of word id/32 (grammar vocabulary words); ids past the grammar's vocabulary are
  // never allowed.
  std::span<const uint32_t> allowed_tokens() const { return mask_; }
  const grammar::GrammarMatcher* matcher() const { return matcher_.get(); }
  // The row's parameters for the device, with its random draw from this sequence's generator.
  RowSampling device_row();

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
  std::vector<uint32_t> mask_;
  bool mask_ready_ = false;
};

// The distribution a non-greedy sampler draws from, over the whole vocabulary (zeros for filtered tokens), given
// logits that already carry penalties and bias. Exposed so that tests can compare it with the definitions.
std::vector<double> sampling_distribution(std::span<const float> logits, const SamplingParams& params);

// A seed for the index-th sequence of a request seeded with `seed` (SplitMix64 of both).
uint64_t derive_seed(uint64_t seed, uint64_t index);

}  // namespace tern
