#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "core/error.h"
#include "engine/rejection_sampler.h"

namespace tern {

namespace {

int32_t argmax(std::span<const float> values) {
  return static_cast<int32_t>(std::max_element(values.begin(), values.end()) - values.begin());
}

// Candidate tokens after top-k, top-p and min-p with their unnormalized probabilities exp(logit - max).
struct Candidates {
  std::vector<int32_t> ids;
  std::vector<double> weights;
};

Candidates filter(std::span<const float> scaled, const SamplingParams& params) {
  const int32_t vocab = static_cast<int32_t>(scaled.size());
  Candidates c;
  c.ids.resize(vocab);
  std::iota(c.ids.begin(), c.ids.end(), 0);
  const auto more_likely = [&](int32_t a, int32_t b) { return scaled[a] > scaled[b] || (scaled[a] == scaled[b] && a < b); };
  if (params.top_k > 0 && params.top_k < vocab) {
    std::nth_element(c.ids.begin(), c.ids.begin() + params.top_k, c.ids.end(), more_likely);
    c.ids.resize(params.top_k);
  }
  const bool sorted = params.top_p < 1.0f;
  if (sorted) std::sort(c.ids.begin(), c.ids.end(), more_likely);
  float max_logit = -std::numeric_limits<float>::infinity();
  for (int32_t id : c.ids) max_logit = std::max(max_logit, scaled[id]);
  c.weights.resize(c.ids.size());
  double total = 0;
  for (size_t i = 0; i < c.ids.size(); ++i) total += c.weights[i] = std::exp(static_cast<double>(scaled[c.ids[i]]) - max_logit);
  if (sorted) {
    // Keep the most likely tokens until their probability reaches top_p (the token that crosses it included).
    double cumulative = 0;
    size_t keep = 0;
    while (keep < c.ids.size() && cumulative < params.top_p * total) cumulative += c.weights[keep++];
    keep = std::max<size_t>(keep, 1);
    c.ids.resize(keep);
    c.weights.resize(keep);
  }
  if (params.min_p > 0.0f) {
    // The most likely token has weight exp(0) = 1, so min_p * max_probability is min_p in weights.
    size_t out = 0;
    for (size_t i = 0; i < c.ids.size(); ++i) {
      if (c.weights[i] >= params.min_p) {
        c.ids[out] = c.ids[i];
        c.weights[out++] = c.weights[i];
      }
    }
    c.ids.resize(out);
    c.weights.resize(out);
  }
  return c;
}

void scale(std::span<const float> logits, float temperature, std::vector<float>& out) {
  out.resize(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) out[i] = logits[i] / temperature;
}

TokenLogprob log_softmax_entry(std::span<const float> logits, int32_t token_id, int32_t num_top) {
  const float max_logit = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (float v : logits) sum += std::exp(static_cast<double>(v) - max_logit);
  const double log_sum = max_logit + std::log(sum);
  const auto logprob_of = [&](int32_t id) { return static_cast<float>(logits[id] - log_sum); };
  TokenLogprob entry{token_id, logprob_of(token_id), {}};
  if (num_top > 0) {
    std::vector<int32_t> ids(logits.size());
    std::iota(ids.begin(), ids.end(), 0);
    const auto k = std::min<size_t>(num_top, ids.size());
    std::partial_sort(ids.begin(), ids.begin() + k, ids.end(),
                      [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
    for (size_t i = 0; i < k; ++i) {
      // Tokens a grammar masked out have no probability to report.
      if (std::isinf(logits[ids[i]])) break;
      entry.top.emplace_back(ids[i], logprob_of(ids[i]));
    }
  }
  return entry;
}

}  // namespace

uint64_t derive_seed(uint64_t seed, uint64_t index) {
  uint64_t z = seed + 0x9e3779b97f4a7c15ull * (index + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

namespace {

// The distribution draw() samples from, over the whole vocabulary.
std::vector<double> scaled_distribution(std::span<const float> scaled, const SamplingParams& params) {
  const auto c = filter(scaled, params);
  std::vector<double> probs(scaled.size(), 0.0);
  const double total = std::accumulate(c.weights.begin(), c.weights.end(), 0.0);
  for (size_t i = 0; i < c.ids.size(); ++i) probs[c.ids[i]] = c.weights[i] / total;
  return probs;
}

}  // namespace

std::vector<double> sampling_distribution(std::span<const float> logits, const SamplingParams& params) {
  if (params.is_greedy()) fail("sampling_distribution: greedy sampling has no distribution");
  std::vector<float> scaled;
  scale(logits, params.temperature, scaled);
  return scaled_distribution(scaled, params);
}

SequenceSampler::SequenceSampler(SamplingParams params, uint64_t seed, std::span<const int32_t> prompt_token_ids)
    : params_(std::move(params)), rng_(seed) {
  if (params_.repetition_penalty != 1.0f) {
    prompt_token_ids_.assign(prompt_token_ids.begin(), prompt_token_ids.end());
    std::sort(prompt_token_ids_.begin(), prompt_token_ids_.end());
    prompt_token_ids_.erase(std::unique(prompt_token_ids_.begin(), prompt_token_ids_.end()), prompt_token_ids_.end());
  }
  if (params_.constraint) {
    // No rollback: outputs only grow (a preempted sequence keeps its sampler, with the grammar state and the watch
    // for the end of the reasoning, and recomputes only its KV).
    matcher_ = std::make_unique<grammar::GrammarMatcher>(params_.constraint, 0);
    mask_.resize(params_.constraint->vocabulary().bitmask_words());
    if (params_.constraint_after) reasoning_end_.emplace(*params_.constraint_after);
  }
}

bool SequenceSampler::is_plain_greedy() const {
  return params_.is_greedy() && !matcher_ && params_.logit_bias.empty() && params_.repetition_penalty == 1.0f &&
         params_.frequency_penalty == 0.0f && params_.presence_penalty == 0.0f && !params_.logprobs;
}

bool SequenceSampler::samples_on_device() const {
  return !matcher_ && params_.logit_bias.empty() && params_.repetition_penalty == 1.0f && params_.frequency_penalty == 0.0f &&
         params_.presence_penalty == 0.0f && params_.min_p == 0.0f && !params_.logprobs;
}

RowSampling SequenceSampler::device_row(int32_t draft_id) {
  RowSampling row;
  row.temperature = params_.temperature;
  row.top_k = params_.top_k;
  row.top_p = params_.top_p;
  if (!params_.is_greedy()) {
    // float rounding may carry a draw just below 1 up to 1; the device expects [0, 1).
    const auto draw = [this] { return std::min(static_cast<float>(uniform()), std::nextafter(1.0f, 0.0f)); };
    if (draft_id >= 0) {
      row.draft_id = draft_id;
      row.draft_uniform = draw();
    }
    row.uniform = draw();
  }
  return row;
}

void SequenceSampler::record(int32_t token_id) {
  ++output_counts_[token_id];
  if (!matcher_) return;
  mask_ready_ = false;
  if (reasoning_end_) {
    // Reasoning tokens, the marker's last one included, are not the grammar's (vLLM's should_advance answers false
    // for the step that ends the reasoning too).
    if (reasoning_end_->feed(token_id)) reasoning_end_.reset();
    return;
  }
  // Once the grammar has ended only EOS is allowed (see prepare_mask), and repeating it changes nothing.
  if (matcher_->is_terminated() && params_.constraint->vocabulary().is_eos(token_id)) return;
  if (!matcher_->accept_token(token_id)) {
    fail("sampler: token {} is not allowed by the request's grammar here", token_id);
  }
}

void SequenceSampler::prepare_mask() {
  if (!grammar_applies() || mask_ready_) return;
  const grammar::TokenVocabulary& vocabulary = params_.constraint->vocabulary();
  const auto allow_only_eos = [&] {
    std::fill(mask_.begin(), mask_.end(), 0u);
    for (int32_t id : vocabulary.eos_ids()) mask_[static_cast<size_t>(id) / 32] |= 1u << (id % 32);
  };
  if (matcher_->is_terminated()) {
    // Only with ignore_eos does a sequence outlive its grammar's end: it may repeat EOS, nothing else.
    allow_only_eos();
  } else {
    matcher_->fill_next_token_bitmask(mask_);
    // A grammar that needs bytes no token spells is stuck: ending the output beats emitting text it forbids.
    if (std::all_of(mask_.begin(), mask_.end(), [](uint32_t word) { return word == 0; })) allow_only_eos();
  }
  mask_ready_ = true;
}

void SequenceSampler::apply_mask(std::span<float> logits) {
  prepare_mask();
  constexpr float kMasked = -std::numeric_limits<float>::infinity();
  const size_t num_masked_ids = std::min(logits.size(), mask_.size() * 32);
  for (size_t word = 0; word * 32 < num_masked_ids; ++word) {
    const uint32_t bits = mask_[word];
    if (bits == UINT32_MAX) continue;
    const size_t end = std::min(num_masked_ids, word * 32 + 32);
    for (size_t id = word * 32; id < end; ++id) {
      if (!((bits >> (id % 32)) & 1u)) logits[id] = kMasked;
    }
  }
  // Ids past the grammar's vocabulary (the model's padding rows) are never allowed; nor are ids that the mask
  // words cover but the vocabulary does not have (their bits are zero).
  for (size_t id = num_masked_ids; id < logits.size(); ++id) logits[id] = kMasked;
}

void SequenceSampler::apply_penalties(std::span<float> logits) const {
  const int32_t vocab = static_cast<int32_t>(logits.size());
  for (const auto& [token, bias] : params_.logit_bias) {
    if (token < vocab) logits[token] += bias;
  }
  if (params_.repetition_penalty != 1.0f) {
    const auto penalize = [&](int32_t token) {
      if (token < 0 || token >= vocab) return;
      float& v = logits[token];
      v = v > 0 ? v / params_.repetition_penalty : v * params_.repetition_penalty;
    };
    for (int32_t token : prompt_token_ids_) penalize(token);
    for (const auto& [token, count] : output_counts_) {
      if (!std::binary_search(prompt_token_ids_.begin(), prompt_token_ids_.end(), token)) penalize(token);
    }
  }
  if (params_.frequency_penalty != 0.0f || params_.presence_penalty != 0.0f) {
    for (const auto& [token, count] : output_counts_) {
      if (token >= 0 && token < vocab) {
        logits[token] -= params_.frequency_penalty * count + params_.presence_penalty;
      }
    }
  }
}

double SequenceSampler::uniform() { return static_cast<double>(rng_() >> 11) * 0x1.0p-53; }

int32_t SequenceSampler::draw(std::span<const float> scaled_logits) {
  const auto c = filter(scaled_logits, params_);
  const double total = std::accumulate(c.weights.begin(), c.weights.end(), 0.0);
  const double target = uniform() * total;
  double cumulative = 0;
  for (size_t i = 0; i < c.ids.size(); ++i) {
    cumulative += c.weights[i];
    if (target < cumulative) return c.ids[i];
  }
  // Rounding left the target at the total: the last candidate with any weight (masked tokens have none).
  for (size_t i = c.ids.size(); i-- > 0;) {
    if (c.weights[i] > 0) return c.ids[i];
  }
  return c.ids.back();
}

SampleOutcome SequenceSampler::sample(std::span<float> logits) {
  if (logits.empty()) fail("sampler: empty logits row");
  if (grammar_applies()) apply_mask(logits);
  apply_penalties(logits);
  SampleOutcome outcome;
  if (params_.is_greedy()) {
    outcome.token_id = argmax(logits);
    if (params_.logprobs) outcome.logprob = log_softmax_entry(logits, outcome.token_id, *params_.logprobs);
  } else {
    std::vector<float> scaled;
    scale(logits, params_.temperature, scaled);
    outcome.token_id = draw(scaled);
    if (params_.logprobs) outcome.logprob = log_softmax_entry(scaled, outcome.token_id, *params_.logprobs);
  }
  record(outcome.token_id);
  return outcome;
}

std::vector<SampleOutcome> SequenceSampler::verify(std::span<float> logits, std::span<const int32_t> draft_ids) {
  const size_t num_rows = draft_ids.size() + 1;
  if (logits.empty() || logits.size() % num_rows != 0) {
    fail("sampler: {} logits do not split into {} rows to verify {} drafts", logits.size(), num_rows, draft_ids.size());
  }
  const size_t vocab = logits.size() / num_rows;
  std::vector<SampleOutcome> outcomes;
  for (size_t i = 0; i < draft_ids.size(); ++i) {
    const std::span<float> row = logits.subspan(i * vocab, vocab);
    const int32_t draft_id = draft_ids[i];
    if (grammar_applies()) apply_mask(row);
    apply_penalties(row);
    SampleOutcome outcome;
    std::vector<float> scaled;
    if (params_.is_greedy()) {
      outcome.token_id = argmax(row);
      if (params_.logprobs) outcome.logprob = log_softmax_entry(row, outcome.token_id, *params_.logprobs);
    } else {
      scale(row, params_.temperature, scaled);
      const std::vector<double> target = scaled_distribution(scaled, params_);
      outcome.token_id = accepts_draft(target, {}, draft_id, uniform()) ? draft_id
                                                                         : sample_residual(target, {}, draft_id, uniform());
      if (params_.logprobs) outcome.logprob = log_softmax_entry(scaled, outcome.token_id, *params_.logprobs);
    }
    record(outcome.token_id);
    const bool kept = outcome.token_id == draft_id;
    outcomes.push_back(std::move(outcome));
    if (!kept) return outcomes;
  }
  outcomes.push_back(sample(logits.subspan(draft_ids.size() * vocab, vocab)));
  return outcomes;
}

}  // namespace tern
