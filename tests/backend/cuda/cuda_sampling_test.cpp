// Device sampling (Backend::sample) against its definition computed here in double precision: greedy rows and
// top-k 1 are the argmax; with temperature, top-k and top-p, rows whose draws stratify [0, 1) pick each token with
// the frequency of the filtered softmax, and never a filtered-out token; rows verifying a draft keep it exactly
// where their acceptance draw falls below its probability and otherwise draw another token, so that their tokens
// too follow the filtered softmax.
#include <map>
#include <numeric>

#include "cuda_test_util.h"

namespace tern {
namespace {

using testing::random_bf16_values;

// The filtered softmax: tokens at or above the k-th largest logit (ties kept), then the fewest values from the
// top whose mass reaches top_p of that set (ties kept), softmax(x / temperature) over what is left.
std::vector<double> reference_distribution(const std::vector<float>& logits, float temperature, int top_k,
                                           float top_p) {
  std::vector<float> sorted = logits;
  std::sort(sorted.rbegin(), sorted.rend());
  const float max_value = sorted[0];
  float threshold = top_k > 0 && top_k < static_cast<int>(logits.size()) ? sorted[top_k - 1] : sorted.back();
  auto mass = [&](float at_least) {
    double m = 0;
    for (float x : logits) m += x >= at_least ? std::exp((double(x) - max_value) / temperature) : 0.0;
    return m;
  };
  if (top_p < 1.0f) {
    const double target = top_p * mass(threshold);
    for (float v : sorted) {  // descending: the first value whose kept mass reaches the target
      if (v < threshold) break;
      if (mass(v) >= target) {
        threshold = v;
        break;
      }
    }
  }
  std::vector<double> p(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) {
    p[i] = logits[i] >= threshold ? std::exp((double(logits[i]) - max_value) / temperature) : 0.0;
  }
  const double total = std::accumulate(p.begin(), p.end(), 0.0);
  for (auto& v : p) v /= total;
  return p;
}

class CudaSamplingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
    gpu = make_cuda_backend(0);
  }
  std::unique_ptr<Backend> gpu;
};

TEST_F(CudaSamplingTest, GreedyAndTopOneAreTheArgmax) {
  ASSERT_TRUE(gpu->samples_on_device());
  const int rows = 8, vocab = 50000;
  const auto values = random_bf16_values(size_t(rows) * vocab, 11, 3.0f);
  const Tensor logits = gpu->from_host_f32(values, {rows, vocab});
  std::vector<RowSampling> params(rows);
  for (int r = 0; r < rows; ++r) {
    params[r].temperature = r % 2 ? 0.0f : 0.8f;
    params[r].top_k = r % 2 ? 0 : 1;
    // A draw of 0 takes the first kept token: bf16 logits tie at the top often enough that top-k 1 keeps two.
    params[r].uniform = r % 2 ? 0.37f + 0.07f * r : 0.0f;
  }
  const auto sampled = gpu->to_host_i32(*gpu->sample(logits, params));
  const auto argmax = gpu->to_host_i32(gpu->argmax(logits));
  EXPECT_EQ(sampled, argmax);
}

TEST_F(CudaSamplingTest, FrequenciesFollowTheFilteredSoftmax) {
  const int vocab = 64, rows = 4096;
  struct Case {
    float temperature;
    int top_k;
    float top_p;
  };
  for (const Case c : {Case{1.0f, 0, 1.0f}, Case{0.7f, 20, 1.0f}, Case{1.3f, 0, 0.8f}, Case{0.7f, 20, 0.9f}}) {
    const auto row_values = random_bf16_values(vocab, 5, 2.0f);
    std::vector<float> values;
    for (int r = 0; r < rows; ++r) values.insert(values.end(), row_values.begin(), row_values.end());
    std::vector<RowSampling> params(rows);
    for (int r = 0; r < rows; ++r) params[r] = {c.temperature, c.top_k, c.top_p, (r + 0.5f) / rows};
    const auto ids = gpu->to_host_i32(*gpu->sample(gpu->from_host_f32(values, {rows, vocab}), params));
    std::vector<double> frequency(vocab, 0.0);
    for (int32_t id : ids) {
      ASSERT_GE(id, 0);
      ASSERT_LT(id, vocab);
      frequency[id] += 1.0 / rows;
    }
    const auto expected = reference_distribution(row_values, c.temperature, c.top_k, c.top_p);
    for (int i = 0; i < vocab; ++i) {
      if (expected[i] == 0.0) {
        EXPECT_EQ(frequency[i], 0.0) << "token " << i << " was filtered out";
      }
      // Stratified draws: each token's count is off by at most about one row.
      EXPECT_NEAR(frequency[i], expected[i], 2.5 / rows) << "token " << i << " T=" << c.temperature
                                                          << " k=" << c.top_k << " p=" << c.top_p;
    }
  }
}

TEST_F(CudaSamplingTest, DraftsAreKeptWithTheirProbabilityAndTheTokensFollowTheFilteredSoftmax) {
  const int vocab = 64, rows = 16384;
  struct Case {
    float temperature;
    int top_k;
    float top_p;
    bool filtered_draft;  // a draft the filters drop: never kept
  };
  for (const Case c : {Case{1.0f, 0, 1.0f, false}, Case{0.7f, 20, 1.0f, false}, Case{1.3f, 0, 0.8f, false},
                       Case{0.7f, 20, 0.9f, true}}) {
    const auto row_values = random_bf16_values(vocab, 7, 2.0f);
    const auto expected = reference_distribution(row_values, c.temperature, c.top_k, c.top_p);
    // The draft: the kept token nearest probability 0.3, or a filtered-out one.
    int draft = -1;
    for (int i = 0; i < vocab; ++i) {
      if (c.filtered_draft ? expected[i] == 0.0
                           : expected[i] > 0.0 && (draft < 0 || std::abs(expected[i] - 0.3) < std::abs(expected[draft] - 0.3))) {
        draft = i;
      }
    }
    ASSERT_GE(draft, 0);
    std::vector<float> values;
    for (int r = 0; r < rows; ++r) values.insert(values.end(), row_values.begin(), row_values.end());
    std::vector<RowSampling> params(rows);
    for (int r = 0; r < rows; ++r) {
      // Acceptance draws stratify [0, 1); the residual's draws are a permutation of the same strata.
      params[r] = {c.temperature, c.top_k, c.top_p, ((r * 7919) % rows + 0.5f) / rows, draft, (r + 0.5f) / rows};
    }
    const auto ids = gpu->to_host_i32(*gpu->sample(gpu->from_host_f32(values, {rows, vocab}), params));
    std::vector<double> frequency(vocab, 0.0);
    const std::string what = "T=" + std::to_string(c.temperature) + " k=" + std::to_string(c.top_k) +
                             " p=" + std::to_string(c.top_p) + " draft " + std::to_string(draft);
    for (int r = 0; r < rows; ++r) {
      ASSERT_GE(ids[r], 0);
      ASSERT_LT(ids[r], vocab);
      frequency[ids[r]] += 1.0 / rows;
      // Kept exactly where the acceptance draw is below the draft's probability (draws within float rounding of it
      // aside).
      if (std::abs(params[r].draft_uniform - expected[draft]) > 1e-4) {
        ASSERT_EQ(ids[r] == draft, params[r].draft_uniform < expected[draft]) << what << ", row " << r;
      }
    }
    for (int i = 0; i < vocab; ++i) {
      if (expected[i] == 0.0) EXPECT_EQ(frequency[i], 0.0) << what << ": token " << i << " was filtered out";
      EXPECT_NEAR(frequency[i], expected[i], 4.0 * std::sqrt(expected[i] * (1.0 - expected[i]) / rows) + 2.0 / rows)
          << what << ": token " << i;
    }
  }
}

// Verify rows of greedy sequences ignore their drafts: the argmax.
TEST_F(CudaSamplingTest, GreedyRowsIgnoreTheirDrafts) {
  const int vocab = 64;
  const auto row_values = random_bf16_values(vocab, 9, 2.0f);
  const int argmax = static_cast<int>(std::max_element(row_values.begin(), row_values.end()) - row_values.begin());
  RowSampling row{0.0f, 0, 1.0f, 0.5f, (argmax + 1) % vocab, 0.0f};
  const auto ids = gpu->to_host_i32(*gpu->sample(gpu->from_host_f32(row_values, {1, vocab}), {&row, 1}));
  EXPECT_EQ(ids, std::vector<int32_t>{argmax});
  row.draft_id = vocab;
  EXPECT_THROW(gpu->sample(gpu->from_host_f32(row_values, {1, vocab}), {&row, 1}), Error);
}

}  // namespace
}  // namespace tern
