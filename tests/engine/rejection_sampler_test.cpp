// Speculative sampling against its definition: the tokens it emits are distributed as the target's distribution,
// whatever the draft's (a chi-square test over many seeded draws), and greedy verification keeps exactly the drafts
// that one-token-a-step sampling would have produced.
#include "engine/rejection_sampler.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "engine/sampler.h"

namespace tern {
namespace {

// The chi-square statistic's 0.001 critical values for 1..10 degrees of freedom: a correct sampler fails one
// seed set in a thousand, and the seeds are fixed.
constexpr double kChiSquareCritical[] = {10.83, 13.82, 16.27, 18.47, 20.52, 22.46, 24.32, 26.12, 27.88, 29.59};

// Pearson's statistic of `counts` against `expected` probabilities; categories of probability 0 must be empty.
double chi_square(const std::vector<int64_t>& counts, const std::vector<double>& expected, int64_t num_samples,
                  int* degrees_of_freedom) {
  double statistic = 0;
  int categories = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    if (expected[i] == 0) {
      EXPECT_EQ(counts[i], 0) << "token " << i << " has no probability but was drawn";
      continue;
    }
    const double e = expected[i] * static_cast<double>(num_samples);
    statistic += (counts[i] - e) * (counts[i] - e) / e;
    ++categories;
  }
  *degrees_of_freedom = categories - 1;
  return statistic;
}

void expect_distributed_as(const std::vector<int64_t>& counts, const std::vector<double>& expected, int64_t n) {
  int df = 0;
  const double statistic = chi_square(counts, expected, n, &df);
  ASSERT_GE(df, 1);
  ASSERT_LE(df, 10);
  EXPECT_LT(statistic, kChiSquareCritical[df - 1]) << "chi-square with " << df << " degrees of freedom";
}

TEST(RejectionSampler, ADraftDistributionUnlikeTheTargetStillYieldsTheTarget) {
  const std::vector<double> target = {0.05, 0.4, 0.25, 0.0, 0.3};
  const std::vector<double> draft = {0.5, 0.1, 0.1, 0.2, 0.1};  // mass where the target has none, too
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  std::discrete_distribution<int32_t> from_draft(draft.begin(), draft.end());
  constexpr int64_t kSamples = 200000;
  std::vector<int64_t> counts(target.size(), 0);
  int64_t accepted = 0;
  for (int64_t i = 0; i < kSamples; ++i) {
    const int32_t d = from_draft(rng);
    if (accepts_draft(target, draft, d, uniform(rng))) {
      ++counts[d];
      ++accepted;
    } else {
      ++counts[sample_residual(target, draft, d, uniform(rng))];
    }
  }
  expect_distributed_as(counts, target, kSamples);
  // The acceptance rate is sum(min(p, q)) = 0.05 + 0.1 + 0.1 + 0 + 0.1.
  EXPECT_NEAR(static_cast<double>(accepted) / kSamples, 0.35, 0.01);
}

TEST(RejectionSampler, APointMassDraftIsKeptWithTheTargetsProbabilityAndItsResidualExcludesIt) {
  const std::vector<double> target = {0.1, 0.6, 0.3};
  EXPECT_TRUE(accepts_draft(target, {}, 1, 0.59));
  EXPECT_FALSE(accepts_draft(target, {}, 1, 0.61));
  EXPECT_FALSE(accepts_draft(target, {}, 0, 0.1));
  // The residual is the target without the draft: {0.1, 0, 0.3} / 0.4.
  EXPECT_EQ(sample_residual(target, {}, 1, 0.0), 0);
  EXPECT_EQ(sample_residual(target, {}, 1, 0.24), 0);
  EXPECT_EQ(sample_residual(target, {}, 1, 0.26), 2);
  EXPECT_EQ(sample_residual(target, {}, 1, 0.999), 2);
}

// Logits over a vocabulary of 8 whose top-p 0.9 nucleus at temperature 1 keeps 5 tokens.
std::vector<float> small_vocabulary_logits() { return {2.0f, 0.5f, 1.6f, -1.0f, 1.0f, 0.2f, -3.0f, 1.2f}; }

SamplingParams temperature_one_top_p() {
  SamplingParams params;
  params.temperature = 1.0f;
  params.top_p = 0.9f;
  return params;
}

// The first token verify() emits for a point-mass draft, over many seeds, against the target's own distribution.
void expect_verify_samples_the_target(int32_t draft_id) {
  const std::vector<float> logits = small_vocabulary_logits();
  const SamplingParams params = temperature_one_top_p();
  const std::vector<double> target = sampling_distribution(logits, params);
  constexpr int64_t kSamples = 40000;
  std::vector<int64_t> counts(logits.size(), 0);
  for (int64_t seed = 0; seed < kSamples; ++seed) {
    SequenceSampler sampler(params, derive_seed(1234, static_cast<uint64_t>(seed)), {});
    // Two rows: the draft's and the one after it (used only when the draft is kept).
    std::vector<float> rows = logits;
    rows.insert(rows.end(), logits.begin(), logits.end());
    const int32_t drafts[] = {draft_id};
    const auto outcomes = sampler.verify(rows, drafts);
    ASSERT_FALSE(outcomes.empty());
    ++counts[static_cast<size_t>(outcomes.front().token_id)];
    EXPECT_EQ(outcomes.size(), outcomes.front().token_id == draft_id ? 2u : 1u);
  }
  expect_distributed_as(counts, target, kSamples);
}

TEST(SequenceSamplerVerify, SampledOutputsFollowTheTargetAtTemperatureOneWithTopP) {
  expect_verify_samples_the_target(0);  // the likeliest token
  expect_verify_samples_the_target(4);  // a token inside the nucleus
  expect_verify_samples_the_target(6);  // a token top-p filters out: never kept
}

TEST(SequenceSamplerVerify, SeededVerificationIsReproducible) {
  const std::vector<float> logits = small_vocabulary_logits();
  std::vector<float> rows;
  for (int r = 0; r < 4; ++r) rows.insert(rows.end(), logits.begin(), logits.end());
  const int32_t drafts[] = {0, 2, 4};
  for (uint64_t seed = 0; seed < 50; ++seed) {
    SequenceSampler a(temperature_one_top_p(), seed, {});
    SequenceSampler b(temperature_one_top_p(), seed, {});
    std::vector<float> rows_a = rows, rows_b = rows;
    std::vector<int32_t> ids_a, ids_b;
    for (const auto& o : a.verify(rows_a, drafts)) ids_a.push_back(o.token_id);
    for (const auto& o : b.verify(rows_b, drafts)) ids_b.push_back(o.token_id);
    EXPECT_EQ(ids_a, ids_b) << "seed " << seed;
  }
}

// Greedy verification against one-token-a-step sampling of the same rows, with a frequency penalty and logprobs
// that see the tokens kept before each row.
TEST(SequenceSamplerVerify, GreedyKeepsTheDraftsOneStepSamplingWouldProduceAndAddsItsOwnToken) {
  SamplingParams params;
  params.temperature = 0.0f;
  params.frequency_penalty = 0.5f;
  params.logprobs = 2;
  // Token 1 leads every row by 0.3: a penalty of 0.5 per occurrence hands the second row to token 3.
  const std::vector<std::vector<float>> rows = {
      {0.0f, 1.3f, 0.2f, 1.0f}, {0.0f, 1.3f, 0.2f, 1.0f}, {0.0f, 0.1f, 2.0f, 1.0f}, {0.5f, 0.1f, 0.2f, 0.0f}};
  std::vector<int32_t> stepwise;
  std::vector<float> stepwise_logprobs;
  {
    SequenceSampler sampler(params, 0, {});
    for (auto row : rows) {
      const auto outcome = sampler.sample(row);
      stepwise.push_back(outcome.token_id);
      stepwise_logprobs.push_back(outcome.logprob->logprob);
    }
  }
  ASSERT_EQ(stepwise, (std::vector<int32_t>{1, 3, 2, 0}));
  const auto verify = [&](std::vector<int32_t> drafts) {
    SequenceSampler sampler(params, 0, {});
    std::vector<float> flat;
    for (size_t r = 0; r <= drafts.size(); ++r) flat.insert(flat.end(), rows[r].begin(), rows[r].end());
    std::vector<int32_t> ids;
    for (const auto& outcome : sampler.verify(flat, drafts)) {
      EXPECT_FLOAT_EQ(outcome.logprob->logprob, stepwise_logprobs[ids.size()]);
      ids.push_back(outcome.token_id);
    }
    return ids;
  };
  EXPECT_EQ(verify({1, 3, 2}), (std::vector<int32_t>{1, 3, 2, 0}));  // all kept, then the target's own
  EXPECT_EQ(verify({1, 1, 2}), (std::vector<int32_t>{1, 3}));        // the second rejected: the target's token ends
  EXPECT_EQ(verify({2}), (std::vector<int32_t>{1}));
}

}  // namespace
}  // namespace tern
