#pragma once
// One sequence's sampler: logits processors (logit_bias, repetition/frequency/presence penalties, temperature,
// top-k, top-p, min-p) and a random generator of its own, so a seeded sequence draws the same tokens whatever
// else shares its batch. Runs on host logits.
#include <cstdint>
#include <optional>
#include <random>
#include <span>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"
#include "engine/request.h"
#include "engine/sampling_params.h"

namespace tern {

struct SampleOutcome {
  int32_t token_id = 0;
  std::optional<TokenLogprob> logprob;
};

class SequenceSampler {
 public:
  SequenceSampler(SamplingParams params, uint64_t seed, std::span<const int32_t> prompt_token_ids);

  // Picks the next token from `logits` ([vocab], processed in place) and remembers it for the penalties.
  SampleOutcome sample(std::span<float> logits);
  // Records a token picked elsewhere (the backend's argmax on the greedy fast path).
  void record(int32_t token_id);
  // True when sampling is a plain argmax of the raw logits (no processors, no logprobs).
  bool is_plain_greedy() const;
  // True when a backend can sample this sequence on the device (temperature, top-k, top-p only: no penalties,
  // bias, min-p or logprobs, which need the host).
  bool samples_on_device() const;
  // The row's parameters for the device, with its random draw from this sequence's generator.
  RowSampling device_row();

 private:
  void apply_penalties(std::span<float> logits) const;
  int32_t draw(std::span<const float> scaled_logits);
  double uniform();

  SamplingParams params_;
  std::mt19937_64 rng_;
  std::vector<int32_t> prompt_token_ids_;  // sorted, unique
  std::unordered_map<int32_t, int32_t> output_counts_;
};

// The distribution a non-greedy sampler draws from, over the whole vocabulary (zeros for filtered tokens), given
// logits that already carry penalties and bias. Exposed so that tests can compare it with the definitions.
std::vector<double> sampling_distribution(std::span<const float> logits, const SamplingParams& params);

// A seed for the index-th sequence of a request seeded with `seed` (SplitMix64 of both).
uint64_t derive_seed(uint64_t seed, uint64_t index);

}  // namespace tern
