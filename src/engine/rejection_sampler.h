#pragma once
// Speculative sampling (Leviathan et al. 2023, "Fast Inference from Transformers via Speculative Decoding";
// Chen et al. 2023, "Accelerating Large Language Model Decoding with Speculative Sampling"): a draft token d drawn
// from the draft distribution q is kept with probability min(1, p(d) / q(d)), p being the target's distribution
// after every sampling option; on rejection the token is drawn from the residual max(0, p - q), renormalized.
// The emitted token is then distributed exactly as p. A point-mass draft (q = 1 at d: prompt lookup, a greedy draft
// model) is kept with probability p(d), and its residual is p without d.
#include <cstdint>
#include <span>

namespace tern {

// Whether to keep `draft_id` given `uniform` in [0, 1). `draft` is q over the vocabulary, or empty for a point mass.
bool accepts_draft(std::span<const double> target, std::span<const double> draft, int32_t draft_id, double uniform);

// A token from the residual of a rejected `draft_id`, chosen by `uniform` in [0, 1). `draft` as in accepts_draft.
int32_t sample_residual(std::span<const double> target, std::span<const double> draft, int32_t draft_id,
                        double uniform);

}  // namespace tern
