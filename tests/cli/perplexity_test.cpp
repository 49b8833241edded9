// The window plan and the statistics of `tern perplexity` against their definitions: Hugging Face's sliding windows
// (every token after the first scored exactly once, by the first window that holds it) and llama.cpp's standard
// error.
#include <gtest/gtest.h>

#include <cmath>

#include "cli/perplexity.h"

namespace tern::cli {
namespace {

void expect_window(const PerplexityWindow& window, int64_t text_begin, int64_t scored_begin, int64_t text_end) {
  EXPECT_EQ(window.text_begin, text_begin);
  EXPECT_EQ(window.scored_begin, scored_begin);
  EXPECT_EQ(window.text_end, text_end);
}

TEST(PerplexityWindows, WithABosEachWindowReadsItThenTheRestOfTheContext) {
  // 16 positions: the BOS and 15 text tokens; the first window scores all 15, each later one its last 8.
  const auto windows = plan_perplexity_windows(40, 1, 16, 8);
  ASSERT_EQ(windows.size(), 5u);
  expect_window(windows[0], 0, 0, 15);
  expect_window(windows[1], 8, 15, 23);
  expect_window(windows[2], 16, 23, 31);
  expect_window(windows[3], 24, 31, 39);
  expect_window(windows[4], 32, 39, 40);
}

TEST(PerplexityWindows, WithoutAPrefixTheFirstTokenIsOnlyContext) {
  const auto windows = plan_perplexity_windows(40, 0, 16, 8);
  ASSERT_EQ(windows.size(), 4u);
  expect_window(windows[0], 0, 1, 16);
  expect_window(windows[1], 8, 16, 24);
  expect_window(windows[2], 16, 24, 32);
  expect_window(windows[3], 24, 32, 40);
}

TEST(PerplexityWindows, ATextShorterThanTheContextIsOneWindow) {
  const auto windows = plan_perplexity_windows(10, 1, 512, 256);
  ASSERT_EQ(windows.size(), 1u);
  expect_window(windows[0], 0, 0, 10);
}

TEST(PerplexityWindows, EveryTokenAfterTheFirstIsScoredExactlyOnceByTheFirstWindowHoldingIt) {
  for (int64_t num_prefix : {0, 1, 2}) {
    for (int64_t context_len : {2, 3, 5, 16, 33}) {
      const int64_t max_scored = max_scored_tokens_per_window(num_prefix, context_len);
      if (max_scored < 1) continue;
      for (int64_t stride = 1; stride <= max_scored; ++stride) {
        for (int64_t num_text : {1, 2, 7, 31, 100}) {
          if (num_prefix + num_text < 2) continue;
          const std::string where = "prefix " + std::to_string(num_prefix) + " context " +
                                    std::to_string(context_len) + " stride " + std::to_string(stride) + " text " +
                                    std::to_string(num_text);
          const auto windows = plan_perplexity_windows(num_text, num_prefix, context_len, stride);
          std::vector<int> times_scored(static_cast<size_t>(num_text), 0);
          for (size_t k = 0; k < windows.size(); ++k) {
            const PerplexityWindow& window = windows[k];
            EXPECT_EQ(window.text_begin, static_cast<int64_t>(k) * stride) << where;
            EXPECT_LE(num_prefix + window.text_end - window.text_begin, context_len) << where;
            // A scored token has a position before it in its window: the prefix, or an earlier text token.
            EXPECT_GE(window.scored_begin, window.text_begin + (num_prefix > 0 ? 0 : 1)) << where;
            EXPECT_EQ(window.text_end == num_text, k + 1 == windows.size()) << where;
            for (int64_t t = window.scored_begin; t < window.text_end; ++t) {
              // No earlier window held the token with a position before it.
              for (size_t earlier = 0; earlier < k; ++earlier) EXPECT_GE(t, windows[earlier].text_end) << where;
              ++times_scored[static_cast<size_t>(t)];
            }
          }
          for (int64_t t = 0; t < num_text; ++t) {
            EXPECT_EQ(times_scored[static_cast<size_t>(t)], t == 0 && num_prefix == 0 ? 0 : 1) << where << " token " << t;
          }
        }
      }
    }
  }
}

TEST(NllAccumulator, PerplexityAndStandardErrorFollowTheirDefinitions) {
  const std::vector<double> nlls = {1.0, 2.0, 4.0, 0.5};
  NllAccumulator accumulator;
  for (double nll : nlls) accumulator.add(nll);
  const double mean = 7.5 / 4;
  double squared_deviations = 0;
  for (double nll : nlls) squared_deviations += (nll - mean) * (nll - mean);
  const double population_variance = squared_deviations / 4;
  EXPECT_EQ(accumulator.count(), 4);
  EXPECT_DOUBLE_EQ(accumulator.mean(), mean);
  EXPECT_DOUBLE_EQ(accumulator.perplexity(), std::exp(mean));
  // llama.cpp: ppl * sqrt((E[nll^2] - E[nll]^2) / (n - 1)), the standard error of the mean NLL carried to the
  // perplexity by its derivative.
  EXPECT_NEAR(accumulator.std_error(), std::exp(mean) * std::sqrt(population_variance / 3), 1e-12);
}

TEST(NllAccumulator, OneTokenHasNoStandardError) {
  NllAccumulator accumulator;
  accumulator.add(2.0);
  EXPECT_DOUBLE_EQ(accumulator.perplexity(), std::exp(2.0));
  EXPECT_EQ(accumulator.std_error(), 0.0);
}

}  // namespace
}  // namespace tern::cli
