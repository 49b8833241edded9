#include "engine/rejection_sampler.h"

#include <algorithm>

#include "core/error.h"

namespace tern {

namespace {

double draft_probability(std::span<const double> draft, int32_t draft_id, int32_t id) {
  if (draft.empty()) return id == draft_id ? 1.0 : 0.0;
  return draft[static_cast<size_t>(id)];
}

}  // namespace

bool accepts_draft(std::span<const double> target, std::span<const double> draft, int32_t draft_id, double uniform) {
  if (draft_id < 0 || static_cast<size_t>(draft_id) >= target.size()) {
    fail("rejection sampler: draft token {} outside the vocabulary of {}", draft_id, target.size());
  }
  const double q = draft_probability(draft, draft_id, draft_id);
  // u < p / q without dividing (q may be 0 where a draft model drew a token it gave no mass after rounding).
  return uniform * q < target[static_cast<size_t>(draft_id)];
}

int32_t sample_residual(std::span<const double> target, std::span<const double> draft, int32_t draft_id,
                        double uniform) {
  const auto vocab = static_cast<int32_t>(target.size());
  const auto residual = [&](int32_t id) { return std::max(0.0, target[id] - draft_probability(draft, draft_id, id)); };
  double total = 0;
  for (int32_t id = 0; id < vocab; ++id) total += residual(id);
  // p <= q everywhere only where p == q, and then the draft is always kept; rounding may still land here.
  if (!(total > 0)) {
    return static_cast<int32_t>(std::max_element(target.begin(), target.end()) - target.begin());
  }
  const double goal = uniform * total;
  double cumulative = 0;
  int32_t last_positive = -1;
  for (int32_t id = 0; id < vocab; ++id) {
    const double r = residual(id);
    if (r <= 0) continue;
    cumulative += r;
    last_positive = id;
    if (goal < cumulative) return id;
  }
  return last_positive;
}

}  // namespace tern
