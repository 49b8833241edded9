// DeepSeek-V4's CPU ops against their definitions: the mHC weights (sigmoids and a doubly-stochastic stream mix)
// and the fused mix-and-collapse, the compressors' softmax-gated pooling (one pass equal to token-by-token, HCA and
// CSA), the Lightning Indexer's causal top-k. The whole model is checked against transformers in moe_golden_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "core/error.h"

namespace tern {
namespace {

std::vector<float> random_values(size_t n, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> values(n);
  for (float& v : values) v = normal(rng);
  return values;
}

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

TEST(V4Ops, HyperMixGivesSigmoidWeightsAndADoublyStochasticMix) {
  auto backend = make_cpu_backend(1);
  std::mt19937 rng(1);
  const int64_t n = 4, tokens = 3, width = (2 + n) * n;
  const auto mixes = random_values(tokens * width, rng), base = random_values(width, rng);
  const std::vector<float> scale = {0.7f, 1.3f, 2.0f};
  const HyperMixParams params{n, 20, 1e-6f};
  const auto out = backend->to_host_f32(backend->hyper_mix(backend->from_host_f32(mixes, {tokens, width}),
                                                           backend->from_host_f32(base, {width}),
                                                           backend->from_host_f32(scale, {3}), params));
  for (int64_t t = 0; t < tokens; ++t) {
    const float* m = mixes.data() + t * width;
    const float* o = out.data() + t * width;
    for (int64_t i = 0; i < n; ++i) {
      EXPECT_NEAR(o[i], sigmoid(m[i] * scale[0] + base[i]) + 1e-6f, 1e-6f);
      EXPECT_NEAR(o[n + i], 2.0f * sigmoid(m[n + i] * scale[1] + base[n + i]), 1e-6f);
    }
    for (int64_t i = 0; i < n; ++i) {
      float row = 0.0f, column = 0.0f;
      for (int64_t j = 0; j < n; ++j) {
        row += o[2 * n + i * n + j];
        column += o[2 * n + j * n + i];
        EXPECT_GT(o[2 * n + i * n + j], 0.0f);
      }
      EXPECT_NEAR(row, 1.0f, 1e-3f);
      EXPECT_NEAR(column, 1.0f, 1e-4f);
    }
  }
}

// The mix and the collapse as one op: hyper_mix's weights and hyper_collapse by them; streams of another count than
// the mixes' refused.
TEST(V4Ops, HyperMixCollapseIsTheMixThenTheCollapse) {
  auto backend = make_cpu_backend(1);
  std::mt19937 rng(2);
  const int64_t n = 4, tokens = 2, width = (2 + n) * n, hidden = 5;
  const Tensor mixes = backend->from_host_f32(random_values(tokens * width, rng), {tokens, width});
  const Tensor base = backend->from_host_f32(random_values(width, rng), {width});
  const Tensor scale = backend->from_host_f32(std::vector<float>{0.7f, 1.3f, 2.0f}, {3});
  const Tensor streams = backend->from_host_f32(random_values(tokens * n * hidden, rng), {tokens, n, hidden});
  const HyperMixParams params{n, 20, 1e-6f};
  const HyperMixed fused = backend->hyper_mix_collapse(streams, mixes, base, scale, params);
  const Tensor mix = backend->hyper_mix(mixes, base, scale, params);
  EXPECT_EQ(backend->to_host_f32(fused.mix), backend->to_host_f32(mix));
  EXPECT_EQ(backend->to_host_f32(fused.collapsed), backend->to_host_f32(backend->hyper_collapse(streams, mix)));
  const Tensor three_streams = backend->from_host_f32(random_values(tokens * 3 * hidden, rng), {tokens, 3, hidden});
  EXPECT_THROW(backend->hyper_mix_collapse(three_streams, mixes, base, scale, params), Error);
}

class CompressorTest : public ::testing::TestWithParam<bool> {
 protected:
  static constexpr int64_t kRate = 2, kDim = 2, kTokens = 9, kHidden = 3;

  CompressorTest() : backend_(make_cpu_backend(1)) {
    std::mt19937 rng(GetParam() ? 7 : 3);
    params_.compress_rate = kRate;
    params_.entry_dim = kDim;
    params_.overlapping = GetParam();
    kv_ = random_values(kTokens * params_.width(), rng);
    gate_ = random_values(kTokens * params_.width(), rng);
    bias_ = backend_->from_host_f32(random_values(kRate * params_.width(), rng), {kRate, params_.width()});
    norm_ = backend_->from_host_f32(std::vector<float>(kDim, 1.0f), {kDim});
    rope_.inv_freq = backend_->from_host_f32(std::vector<float>(kDim / 2, 0.0f), {kDim / 2});  // angle 0: identity
    rope_.rotary_dim = kDim;
    params_.position_bias = &bias_;
    params_.norm_weight = &norm_;
    params_.rope = &rope_;
  }

  KvCache new_cache() {
    KvLayerSpec spec;
    spec.num_kv_heads = 1;
    spec.key_dim = kDim;
    spec.kind = KvLayerKind::compressed;
    spec.compress_rate = kRate;
    spec.state_dim = params_.state_dim();
    return backend_->allocate_kv_cache({spec}, 3, 4);
  }

  // Feeds tokens [begin, end) as one step.
  void feed(KvCache& cache, int64_t begin, int64_t end) {
    ForwardBatch batch;
    batch.token_ids.assign(end - begin, 0);
    batch.sequences.push_back({static_cast<int32_t>(begin), static_cast<int32_t>(end - begin), {{2, 0, 1}}});
    const auto step = backend_->begin_step(batch);
    const int64_t w = params_.width();
    const std::vector<float> kv(kv_.begin() + begin * w, kv_.begin() + end * w);
    const std::vector<float> gate(gate_.begin() + begin * w, gate_.begin() + end * w);
    backend_->compress_kv(cache, 0, backend_->from_host_f32(kv, {end - begin, w}),
                          backend_->from_host_f32(gate, {end - begin, w}), params_, *step);
  }

  // The compressed entry stored for window `window` (in the slot of its last token).
  std::vector<float> entry(const KvCache& cache, int64_t window) const {
    const std::vector<int32_t> blocks = {2, 0, 1};
    const int64_t pos = (window + 1) * kRate - 1;
    const int64_t slot = blocks[pos / 4] * 4 + pos % 4;
    const float* row = cache.states[0].ptr<float>() + slot * params_.state_dim() + params_.entry_offset();
    return {row, row + kDim};
  }

  std::unique_ptr<Backend> backend_;
  CompressorParams params_;
  std::vector<float> kv_, gate_;
  Tensor bias_, norm_;
  RopeTable rope_;
};

TEST_P(CompressorTest, PoolsEachClosedWindowByItsSoftmaxGates) {
  KvCache cache = new_cache();
  feed(cache, 0, kTokens);
  const auto bias = backend_->to_host_f32(bias_);
  const int64_t w = params_.width();
  for (int64_t window = 0; window < kTokens / kRate; ++window) {
    std::vector<float> expected(kDim);
    for (int64_t d = 0; d < kDim; ++d) {
      // (token, feature) pairs pooled for this dim: the window's tokens (second halves when overlapping) and,
      // when overlapping, the previous window's first halves.
      std::vector<std::pair<int64_t, int64_t>> sources;
      if (params_.overlapping && window > 0) {
        for (int64_t j = 0; j < kRate; ++j) sources.push_back({(window - 1) * kRate + j, d});
      }
      for (int64_t j = 0; j < kRate; ++j) sources.push_back({window * kRate + j, params_.overlapping ? kDim + d : d});
      double denominator = 0.0, pooled = 0.0;
      for (auto [token, f] : sources) denominator += std::exp(gate_[token * w + f] + bias[(token % kRate) * w + f]);
      for (auto [token, f] : sources) {
        pooled += std::exp(gate_[token * w + f] + bias[(token % kRate) * w + f]) / denominator * kv_[token * w + f];
      }
      expected[d] = static_cast<float>(pooled);
    }
    const float rms = std::sqrt((expected[0] * expected[0] + expected[1] * expected[1]) / 2.0f + params_.norm_eps);
    const auto got = entry(cache, window);
    for (int64_t d = 0; d < kDim; ++d) EXPECT_NEAR(got[d], expected[d] / rms, 1e-5f) << "window " << window;
  }
}

TEST_P(CompressorTest, TokenByTokenEqualsOnePass) {
  KvCache whole = new_cache(), pieces = new_cache();
  feed(whole, 0, kTokens);
  feed(pieces, 0, 3);
  for (int64_t t = 3; t < kTokens; ++t) feed(pieces, t, t + 1);
  for (int64_t window = 0; window < kTokens / kRate; ++window) {
    EXPECT_EQ(entry(whole, window), entry(pieces, window)) << "window " << window;
  }
}

INSTANTIATE_TEST_SUITE_P(HcaAndCsa, CompressorTest, ::testing::Bool());

TEST(V4Ops, IndexerPicksTheBestClosedWindowsOnly) {
  auto backend = make_cpu_backend(1);
  const int64_t rate = 2, dim = 2, tokens = 8;
  KvLayerSpec spec;
  spec.num_kv_heads = 1;
  spec.key_dim = dim;
  spec.kind = KvLayerKind::compressed;
  spec.compress_rate = rate;
  spec.state_dim = dim;
  KvCache cache = backend->allocate_kv_cache({spec}, 1, tokens);
  // Entry w (in the slot of token 2w + 1) is (w + 1) * (1, 0): later windows score higher for a query along x.
  for (int64_t w = 0; w < tokens / rate; ++w) {
    float* row = cache.states[0].ptr<float>() + ((w + 1) * rate - 1) * dim;
    row[0] = static_cast<float>(w + 1);
    row[1] = 0.0f;
  }
  ForwardBatch batch;
  batch.token_ids.assign(tokens, 0);
  batch.sequences.push_back({0, static_cast<int32_t>(tokens), {{0}}});
  const auto step = backend->begin_step(batch);
  std::vector<float> query(tokens * dim);
  for (int64_t t = 0; t < tokens; ++t) query[t * dim] = 1.0f;
  IndexerParams params;
  params.compress_rate = rate;
  params.top_k = 2;
  const auto chosen = backend->to_host_i32(
      backend->select_compressed(backend->from_host_f32(query, {tokens, 1, dim}),
                                 backend->from_host_f32(std::vector<float>(tokens, 1.0f), {tokens, 1}), cache, 0,
                                 params, *step));
  const std::vector<int32_t> expected = {-1, -1, 0, -1, 0, -1, 1, 0, 1, 0, 2, 1, 2, 1, 3, 2};
  EXPECT_EQ(chosen, expected);
}

// Exact score ties are broken as transformers breaks them, by a row as long as the prompt's entries (for prompt
// tokens): so a prompt computed in chunks that carry its length picks what one pass picks.
TEST(V4Ops, IndexerTiesDependOnThePromptLengthNotOnChunking) {
  auto backend = make_cpu_backend(1);
  const int64_t rate = 2, dim = 2, tokens = 24;
  KvLayerSpec spec;
  spec.num_kv_heads = 1;
  spec.key_dim = dim;
  spec.kind = KvLayerKind::compressed;
  spec.compress_rate = rate;
  spec.state_dim = dim;
  KvCache cache = backend->allocate_kv_cache({spec}, 1, tokens);  // every entry 0: every score ties at 0
  IndexerParams params;
  params.compress_rate = rate;
  params.top_k = 3;
  auto select = [&](int32_t begin, int32_t count) {
    ForwardBatch batch;
    batch.token_ids.assign(count, 0);
    batch.sequences.push_back({begin, count, {{0}}, static_cast<int32_t>(tokens)});
    const auto step = backend->begin_step(batch);
    return backend->to_host_i32(backend->select_compressed(
        backend->from_host_f32(std::vector<float>(count * dim, 1.0f), {count, 1, dim}),
        backend->from_host_f32(std::vector<float>(count, 1.0f), {count, 1}), cache, 0, params, *step));
  };
  const auto whole = select(0, tokens);
  auto pieces = select(0, 5);
  for (auto [begin, count] : {std::pair{5, 11}, std::pair{16, 8}}) {
    const auto part = select(begin, count);
    pieces.insert(pieces.end(), part.begin(), part.end());
  }
  EXPECT_EQ(pieces, whole);
}

}  // namespace
}  // namespace tern
