// The sampler against the definitions of its filters, computed here independently on a synthetic logit vector.
#include "engine/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"
#include "engine/request_field_error.h"
#include "grammar/compiled_grammar.h"

namespace tern {
namespace {

const std::vector<float> kLogits = {1.0f, 3.0f, -2.0f, 2.5f, 0.5f, 2.9f, -1.0f, 1.7f, 0.0f, 2.0f,
                                    -0.5f, 1.2f, 2.2f, -3.0f, 0.8f, 1.9f, 2.6f, -1.5f, 0.3f, 1.1f};

// softmax(logits / T), then top-k, top-p (smallest most-likely set reaching p) and min-p, renormalized.
std::vector<double> reference_distribution(const std::vector<float>& logits, float temperature, int top_k, float top_p,
                                           float min_p) {
  const size_t n = logits.size();
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return logits[a] > logits[b]; });
  std::vector<bool> keep(n, true);
  if (top_k > 0) {
    for (size_t i = top_k; i < n; ++i) keep[order[i]] = false;
  }
  const auto normalized = [&] {
    std::vector<double> p(n, 0.0);
    double total = 0;
    for (size_t i = 0; i < n; ++i) {
      if (keep[i]) total += p[i] = std::exp(logits[i] / static_cast<double>(temperature));
    }
    for (auto& v : p) v /= total;
    return p;
  };
  auto p = normalized();
  double cumulative = 0;
  for (size_t i : order) {
    if (!keep[i]) continue;
    if (cumulative >= top_p) keep[i] = false;
    cumulative += p[i];
  }
  p = normalized();
  const double max_p = *std::max_element(p.begin(), p.end());
  for (size_t i = 0; i < n; ++i) {
    if (p[i] < min_p * max_p) keep[i] = false;
  }
  return normalized();
}

struct FilterCase {
  float temperature;
  int top_k;
  float top_p;
  float min_p;
};

class SamplerDistribution : public ::testing::TestWithParam<FilterCase> {};

TEST_P(SamplerDistribution, MatchesTheDefinitionExactlyAndInFrequency) {
  const auto c = GetParam();
  SamplingParams params;
  params.temperature = c.temperature;
  params.top_k = c.top_k;
  params.top_p = c.top_p;
  params.min_p = c.min_p;
  const auto expected = reference_distribution(kLogits, c.temperature, c.top_k, c.top_p, c.min_p);
  const auto computed = sampling_distribution(kLogits, params);
  for (size_t i = 0; i < kLogits.size(); ++i) EXPECT_NEAR(computed[i], expected[i], 1e-6) << "token " << i;

  SequenceSampler sampler(params, 12345, {});
  constexpr int kDraws = 100000;
  std::vector<int> counts(kLogits.size(), 0);
  for (int d = 0; d < kDraws; ++d) {
    auto logits = kLogits;
    ++counts[sampler.sample(logits).token_id];
  }
  for (size_t i = 0; i < kLogits.size(); ++i) {
    const double p = expected[i];
    if (p == 0.0) {
      EXPECT_EQ(counts[i], 0) << "filtered token " << i << " was drawn";
      continue;
    }
    // Five standard deviations of a binomial count: fails by chance about once in a million.
    const double sigma = std::sqrt(kDraws * p * (1 - p));
    EXPECT_NEAR(counts[i], kDraws * p, 5 * sigma + 1) << "token " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Filters, SamplerDistribution,
                         ::testing::Values(FilterCase{1.0f, 0, 1.0f, 0.0f}, FilterCase{0.7f, 5, 1.0f, 0.0f},
                                           FilterCase{1.0f, 0, 0.8f, 0.0f}, FilterCase{1.3f, 0, 1.0f, 0.2f},
                                           FilterCase{0.9f, 8, 0.7f, 0.1f}, FilterCase{1.0f, 1, 1.0f, 0.0f}));

TEST(Sampler, SameSeedSameTokensDifferentSeedDifferentTokens) {
  SamplingParams params;
  params.temperature = 1.5f;
  const auto draw = [&](uint64_t seed) {
    SequenceSampler sampler(params, seed, {});
    std::vector<int32_t> out;
    for (int i = 0; i < 64; ++i) {
      auto logits = kLogits;
      out.push_back(sampler.sample(logits).token_id);
    }
    return out;
  };
  EXPECT_EQ(draw(7), draw(7));
  EXPECT_NE(draw(7), draw(8));
  EXPECT_NE(derive_seed(7, 0), derive_seed(7, 1));
}

TEST(Sampler, GreedyPicksTheFirstMaximumAfterBias) {
  SamplingParams params;
  params.temperature = 0.0f;
  SequenceSampler plain(params, 0, {});
  auto logits = kLogits;
  EXPECT_EQ(plain.sample(logits).token_id, 1);
  EXPECT_TRUE(plain.is_plain_greedy());
  params.logit_bias = {{1, -100.0f}};
  SequenceSampler biased(params, 0, {});
  logits = kLogits;
  EXPECT_EQ(biased.sample(logits).token_id, 5);
  EXPECT_FALSE(biased.is_plain_greedy());
}

TEST(Sampler, FrequencyAndPresencePenaltiesCountOutputTokens) {
  SamplingParams params;
  params.temperature = 0.0f;
  params.frequency_penalty = 0.06f;  // token 1 leads token 5 by 0.1
  SequenceSampler sampler(params, 0, {});
  std::vector<int32_t> picks;
  for (int i = 0; i < 3; ++i) {
    auto logits = kLogits;
    picks.push_back(sampler.sample(logits).token_id);
  }
  EXPECT_EQ(picks, (std::vector<int32_t>{1, 1, 5}));  // 3 - 0.12 < 2.9

  params.frequency_penalty = 0.0f;
  params.presence_penalty = 0.2f;
  SequenceSampler presence(params, 0, {});
  picks.clear();
  for (int i = 0; i < 3; ++i) {
    auto logits = kLogits;
    picks.push_back(presence.sample(logits).token_id);
  }
  EXPECT_EQ(picks, (std::vector<int32_t>{1, 5, 1}));  // once each has appeared, 3 - 0.2 beats 2.9 - 0.2 again
}

TEST(Sampler, RepetitionPenaltyDividesPositiveAndMultipliesNegativeLogits) {
  SamplingParams params;
  params.temperature = 0.0f;
  params.repetition_penalty = 2.0f;
  params.logprobs = 0;
  const std::vector<int32_t> prompt{1, 13};
  SequenceSampler sampler(params, 0, prompt);
  auto logits = kLogits;
  const auto outcome = sampler.sample(logits);
  EXPECT_FLOAT_EQ(logits[1], 1.5f);
  EXPECT_FLOAT_EQ(logits[13], -6.0f);
  EXPECT_EQ(outcome.token_id, 5);
}

TEST(Sampler, LogprobsAreTheLogSoftmaxOfTheProcessedLogits) {
  SamplingParams params;
  params.temperature = 0.5f;
  params.top_k = 3;
  params.logprobs = 4;
  SequenceSampler sampler(params, 99, {});
  auto logits = kLogits;
  const auto outcome = sampler.sample(logits);
  ASSERT_TRUE(outcome.logprob);
  double total = 0;
  for (float v : kLogits) total += std::exp(v / 0.5);
  const auto expected = [&](int32_t id) { return kLogits[id] / 0.5 - std::log(total); };
  EXPECT_NEAR(outcome.logprob->logprob, expected(outcome.token_id), 1e-4);
  ASSERT_EQ(outcome.logprob->top.size(), 4u);
  const std::vector<int32_t> most_likely{1, 5, 16, 3};
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(outcome.logprob->top[i].first, most_likely[i]);
    EXPECT_NEAR(outcome.logprob->top[i].second, expected(most_likely[i]), 1e-4);
  }
  EXPECT_TRUE(outcome.token_id == 1 || outcome.token_id == 5 || outcome.token_id == 16);
}

TEST(SamplingParams, ValidationNamesTheBadField) {
  SamplingParams params;
  params.top_p = 0.0f;
  try {
    params.validate(100);
    FAIL() << "top_p 0 accepted";
  } catch (const RequestFieldError& e) {
    EXPECT_EQ(e.field(), "top_p");
    EXPECT_NE(std::string(e.what()).find("top_p"), std::string::npos);
  }
  params = {};
  params.logit_bias = {{100, 1.0f}};
  try {
    params.validate(100);
    FAIL() << "logit_bias for token 100 of 100 accepted";
  } catch (const RequestFieldError& e) {
    EXPECT_EQ(e.field(), "logit_bias");
  }
  params = {};
  params.temperature = -1.0f;
  EXPECT_THROW(params.validate(100), Error);
  StopConditions stop;
  stop.max_tokens = 0;
  EXPECT_THROW(stop.validate(100), Error);
  stop = {};
  stop.stop_token_ids = {100};
  try {
    stop.validate(100);
    FAIL() << "stop token 100 of 100 accepted";
  } catch (const RequestFieldError& e) {
    EXPECT_EQ(e.field(), "stop_token_ids");
    EXPECT_NE(std::string(e.what()).find("stop_token_ids"), std::string::npos);
  }
}

// A constraint that starts after the reasoning: tokens a, b, #, z, the marker </think> and EOS; the grammar is
// "a#b".
namespace reasoning {

constexpr int32_t kA = 0, kB = 1, kHash = 2, kZ = 3, kThinkEnd = 4, kEos = 5;

std::shared_ptr<const grammar::CompiledGrammar> grammar_a_hash_b() {
  auto vocabulary = std::make_shared<const grammar::TokenVocabulary>(
      std::vector<std::string>{"a", "b", "#", "z", "</think>", ""}, std::vector<int32_t>{kEos});
  return grammar::CompiledGrammar::compile(grammar::GrammarKind::kRegex, "a#b", vocabulary);
}

// Greedy with logprobs, over logits that rank `favourite` first, then z (which the grammar never allows), a, #, b.
SampleOutcome sample_with_favourite(SequenceSampler& sampler, int32_t favourite) {
  std::vector<float> logits = {1.0f, 0.2f, 0.5f, 5.0f, 0.0f, -1.0f};
  logits[favourite] = 6.0f;
  return sampler.sample(logits);
}

SamplingParams greedy_constrained(bool after_reasoning) {
  SamplingParams params;
  params.temperature = 0.0f;
  params.logprobs = 2;
  params.constraint = grammar_a_hash_b();
  if (after_reasoning) params.constraint_after = ReasoningEndMarker{{kThinkEnd}, {}, 0};
  return params;
}

}  // namespace reasoning

TEST(Sampler, ConstraintAfterReasoningWaitsForTheMarker) {
  using namespace reasoning;
  SequenceSampler sampler(greedy_constrained(true), 1, {});
  EXPECT_TRUE(sampler.is_constrained());
  EXPECT_FALSE(sampler.grammar_applies());
  // Reasoning: no mask; # (which the grammar would not allow first) is sampled, z reported as the runner-up.
  for (int i = 0; i < 3; ++i) {
    const SampleOutcome outcome = sample_with_favourite(sampler, kHash);
    EXPECT_EQ(outcome.token_id, kHash);
    ASSERT_TRUE(outcome.logprob);
    ASSERT_EQ(outcome.logprob->top.size(), 2u);
    EXPECT_EQ(outcome.logprob->top[1].first, kZ);
    EXPECT_FALSE(sampler.samples_on_device());
  }
  // EOS is not masked while reasoning either.
  std::vector<float> eos_first = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 9.0f};
  SequenceSampler ends_early(greedy_constrained(true), 1, {});
  EXPECT_EQ(ends_early.sample(eos_first).token_id, kEos);
  // The marker ends the reasoning; it is not the grammar's first token.
  EXPECT_EQ(sample_with_favourite(sampler, kThinkEnd).token_id, kThinkEnd);
  EXPECT_TRUE(sampler.grammar_applies());
  // From here the grammar applies: z and the marker are masked out, and only the grammar's tokens come.
  EXPECT_EQ(sample_with_favourite(sampler, kThinkEnd).token_id, kA);
  const SampleOutcome hash = sample_with_favourite(sampler, kZ);
  EXPECT_EQ(hash.token_id, kHash);
  ASSERT_TRUE(hash.logprob);
  EXPECT_EQ(hash.logprob->top.size(), 1u);  // the only token the grammar allows here
  EXPECT_EQ(sample_with_favourite(sampler, kThinkEnd).token_id, kB);
  EXPECT_EQ(sample_with_favourite(sampler, kThinkEnd).token_id, kEos);
  EXPECT_TRUE(sampler.matcher()->is_terminated());
}

TEST(Sampler, ConstraintWithoutReasoningAppliesFromTheFirstToken) {
  using namespace reasoning;
  SequenceSampler sampler(greedy_constrained(false), 1, {});
  EXPECT_TRUE(sampler.grammar_applies());
  EXPECT_EQ(sample_with_favourite(sampler, kThinkEnd).token_id, kA);
  EXPECT_EQ(sample_with_favourite(sampler, kThinkEnd).token_id, kHash);
}

TEST(Sampler, MarkerSpelledByTheGrammarIsContent) {
  // Once the grammar applies, a marker it allows is grammar text like any other token: "</think>" inside a JSON
  // string stays there, and the grammar does not restart.
  using namespace reasoning;
  auto vocabulary = std::make_shared<const grammar::TokenVocabulary>(
      std::vector<std::string>{"a", "b", "#", "z", "</think>", ""}, std::vector<int32_t>{kEos});
  SamplingParams params = greedy_constrained(true);
  params.constraint = grammar::CompiledGrammar::compile(grammar::GrammarKind::kRegex, "a(</think>)+b", vocabulary);
  SequenceSampler sampler(params, 1, {});
  sampler.record(kThinkEnd);  // the end of the reasoning
  EXPECT_EQ(sample_with_favourite(sampler, kThinkEnd).token_id, kA);
  EXPECT_EQ(sample_with_favourite(sampler, kThinkEnd).token_id, kThinkEnd);
  EXPECT_EQ(sample_with_favourite(sampler, kThinkEnd).token_id, kThinkEnd);
  EXPECT_FALSE(sampler.matcher()->is_terminated());
  EXPECT_EQ(sample_with_favourite(sampler, kB).token_id, kB);
  EXPECT_EQ(sample_with_favourite(sampler, kB).token_id, kEos);
}

TEST(SamplingParams, ReasoningEndMarkerIsValidated) {
  using namespace reasoning;
  SamplingParams params = greedy_constrained(true);
  EXPECT_NO_THROW(params.validate(6));
  params.constraint_after->prefix = {6};
  EXPECT_THROW(params.validate(6), Error);
  params.constraint_after->prefix = {};
  EXPECT_THROW(params.validate(6), Error);
  params = greedy_constrained(true);
  params.constraint = nullptr;
  EXPECT_THROW(params.validate(6), Error);
}

}  // namespace
}  // namespace tern
