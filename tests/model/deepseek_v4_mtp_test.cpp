// DeepSeek-V4's MTP block (src/model/arch/deepseek_v4/deepseek_v4_mtp.h) against its definition, composed here in
// float64 around the V4 layer (its attention and MoE blocks and mHC mixes, checked against transformers by the
// golden tests): enorm and e_proj of the embedding added to every stream of hnorm and h_proj of the target's
// streams, the block's own hc_head collapse (inference/model.py's hc_head: sigmoid(mixes * scale + base) + eps
// weights of the streams), its norm and the model's head. And the target's hidden states (the last layer's streams,
// Model::forward_with_hidden_states) against the model's hc_head, final norm and head.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <optional>
#include <random>

#include "core/error.h"
#include "fixtures.h"
#include "model/arch/deepseek_v4/v4_layer.h"
#include "model/checkpoint.h"
#include "model/model.h"
#include "model/mtp_model.h"
#include "model/weight_loader.h"
#include "mtp_layer_reference.h"
#include "v4_mtp_checkpoint.h"

namespace tern {
namespace {

using testing::deepseek_v4_with_mtp;
using testing::fixtures_dir;
using testing::Matrix;
using testing::batch_of;
using testing::checkpoint_values;
using testing::expect_near;
using testing::linear;
using testing::rms_norm;

constexpr size_t kHidden = 64;
constexpr size_t kStreams = 4;

Matrix to_matrix(const std::vector<float>& values) { return Matrix(values.begin(), values.end()); }

// inference/model.py's hc_head: streams [rows, N * hidden] -> [rows, hidden], each stream weighted by
// sigmoid(fn . (x / rms(x)) * scale + base) + hc_eps.
Matrix hc_head(const Matrix& streams, const Matrix& fn, const Matrix& base, double scale, double norm_eps,
               double hc_eps) {
  const size_t width = kStreams * kHidden, rows = streams.size() / width;
  const Matrix normalized = rms_norm(streams, Matrix(width, 1.0), norm_eps);
  const Matrix mixes = linear(normalized, fn, width);
  Matrix out(rows * kHidden, 0.0);
  for (size_t r = 0; r < rows; ++r) {
    for (size_t s = 0; s < kStreams; ++s) {
      const double weight = 1.0 / (1.0 + std::exp(-(mixes[r * kStreams + s] * scale + base[s]))) + hc_eps;
      for (size_t i = 0; i < kHidden; ++i) out[r * kHidden + i] += weight * streams[r * width + s * kHidden + i];
    }
  }
  return out;
}

TEST(DeepseekV4Mtp, TargetHiddenStatesAreTheLastLayersStreams) {
  const auto dir = fixtures_dir() / "models" / "deepseek_v4";
  auto backend = make_cpu_backend(2);
  auto model = load_model(dir, *backend);
  const auto [logits, hidden] = testing::target_step(*model, *backend, {22, 506, 217, 201, 137, 437, 489});
  ASSERT_EQ(hidden.shape, (std::vector<int64_t>{7, static_cast<int64_t>(kStreams * kHidden)}));
  const Checkpoint checkpoint = Checkpoint::open(dir);
  const ModelConfig config = ModelConfig::load(dir);
  const Matrix collapsed = hc_head(to_matrix(backend->to_host_f32(hidden)),
                                   checkpoint_values(checkpoint, "model.hc_head.hc_fn"),
                                   checkpoint_values(checkpoint, "model.hc_head.hc_base"),
                                   checkpoint_values(checkpoint, "model.hc_head.hc_scale")[0], config.rms_norm_eps,
                                   config.raw.value("hc_eps", 1e-6));
  const Matrix normalized =
      rms_norm(collapsed, checkpoint_values(checkpoint, "model.norm.weight"), config.rms_norm_eps);
  expect_near(logits, linear(normalized, checkpoint_values(checkpoint, "head.weight"), kHidden), 2e-5,
              "head(norm(hc_head(hidden states)))");
}

// The block's step over `tokens` (entries from position num_cached on, with their streams) composed in float64
// around the V4 layer, which runs on its own cache: logits [T, vocab] and the layer's output streams [T, N * hidden].
class ReferenceV4MtpBlock {
 public:
  ReferenceV4MtpBlock(const std::filesystem::path& dir, Backend& backend)
      : config_(ModelConfig::load(dir)),
        v4_(read_deepseek_v4_config(config_)),
        checkpoint_(Checkpoint::open(dir)),
        backend_(backend) {
    WeightLoader weights(checkpoint_, backend);
    const V4LayerBuilder builder(config_, v4_, backend, v4_checkpoint_names(checkpoint_));
    layer_.attention_norm = weights.load("mtp.0.attn_norm.weight", {64});
    layer_.feed_forward_norm = weights.load("mtp.0.ffn_norm.weight", {64});
    hyper_.emplace(builder.build(weights, "mtp.0", v4_.mtp_attention_kinds.at(0), false, layer_));
    cache_ = backend.allocate_kv_cache({layer_.attention->kv_spec()}, 2, 16);
    for (const char* name : {"embed.weight", "mtp.0.enorm.weight", "mtp.0.hnorm.weight", "mtp.0.e_proj.weight",
                             "mtp.0.h_proj.weight", "mtp.0.hc_head_fn", "mtp.0.hc_head_base", "mtp.0.hc_head_scale",
                             "mtp.0.norm.weight", "head.weight"}) {
      values_[name] = checkpoint_values(checkpoint_, name);
    }
  }

  std::pair<Matrix, Matrix> step(const std::vector<int32_t>& tokens, int32_t num_cached, const Matrix& streams) {
    const double eps = config_.rms_norm_eps;
    const Matrix& embed = values_.at("embed.weight");
    Matrix embedded;
    for (int32_t t : tokens) {
      embedded.insert(embedded.end(), embed.begin() + t * kHidden, embed.begin() + (t + 1) * kHidden);
    }
    const Matrix e = linear(rms_norm(embedded, values_.at("mtp.0.enorm.weight"), eps),
                            values_.at("mtp.0.e_proj.weight"), kHidden);
    Matrix x = linear(rms_norm(streams, values_.at("mtp.0.hnorm.weight"), eps), values_.at("mtp.0.h_proj.weight"),
                      kHidden);  // each stream a row
    for (size_t r = 0; r < tokens.size(); ++r) {
      for (size_t s = 0; s < kStreams; ++s) {
        for (size_t i = 0; i < kHidden; ++i) x[(r * kStreams + s) * kHidden + i] += e[r * kHidden + i];
      }
    }
    const ForwardBatch batch = batch_of(tokens, num_cached, 2);
    const auto context = backend_.begin_step(batch);
    const auto count = static_cast<int64_t>(tokens.size());
    const Tensor in = backend_.from_host_f32(std::vector<float>(x.begin(), x.end()),
                                             {count, static_cast<int64_t>(kStreams), static_cast<int64_t>(kHidden)});
    const Tensor out = v4_layer_forward(backend_, layer_, *hyper_, in, cache_, 0, *context, static_cast<float>(eps));
    const Matrix out_streams = to_matrix(backend_.to_host_f32(out));
    const Matrix collapsed = hc_head(out_streams, values_.at("mtp.0.hc_head_fn"), values_.at("mtp.0.hc_head_base"),
                                     values_.at("mtp.0.hc_head_scale")[0], eps, v4_.hc_eps);
    const Matrix normalized = rms_norm(collapsed, values_.at("mtp.0.norm.weight"), eps);
    return {linear(normalized, values_.at("head.weight"), kHidden), out_streams};
  }

 private:
  ModelConfig config_;
  DeepseekV4Config v4_;
  Checkpoint checkpoint_;
  Backend& backend_;
  DecoderLayer layer_;
  std::optional<LayerHyperConnections> hyper_;
  KvCache cache_;
  std::map<std::string, Matrix> values_;
};

class DeepseekV4MtpLayer : public ::testing::TestWithParam<std::string> {};

TEST_P(DeepseekV4MtpLayer, MatchesItsDefinitionOverTwoSteps) {
  const auto dir = deepseek_v4_with_mtp(GetParam());
  auto backend = make_cpu_backend(2);
  auto mtp = load_mtp_model(dir, *backend);
  ASSERT_EQ(mtp->kv_layers().size(), 1u);
  KvCache cache = backend->allocate_kv_cache(mtp->kv_layers(), 2, 16);
  ReferenceV4MtpBlock reference(dir, *backend);
  std::mt19937 rng(5);
  std::normal_distribution<double> normal(0.0, 1.5);
  const std::vector<int32_t> tokens = {22, 506, 217, 201, 137, 437, 489, 3, 511, 40, 41};
  const size_t width = kStreams * kHidden;
  Matrix streams(tokens.size() * width);
  for (double& v : streams) v = normal(rng);
  // Nine entries (two closed compression windows of 4), then two more over the cached ones.
  int32_t num_cached = 0;
  for (int32_t count : {9, 2}) {
    const std::vector<int32_t> step_tokens(tokens.begin() + num_cached, tokens.begin() + num_cached + count);
    const Matrix step_streams(streams.begin() + num_cached * width, streams.begin() + (num_cached + count) * width);
    Tensor outputs;
    const Tensor logits = mtp->forward(
        *backend->begin_step(batch_of(step_tokens, num_cached, 2)), cache,
        backend->from_host_f32(std::vector<float>(step_streams.begin(), step_streams.end()),
                               {count, static_cast<int64_t>(width)}),
        outputs);
    const auto [want_logits, want_outputs] = reference.step(step_tokens, num_cached, step_streams);
    const std::string what = GetParam() + ", step from " + std::to_string(num_cached);
    ASSERT_EQ(outputs.shape, (std::vector<int64_t>{count, static_cast<int64_t>(width)})) << what;
    expect_near(backend->to_host_f32(logits), want_logits, 2e-5, what + ": logits");
    expect_near(backend->to_host_f32(outputs), want_outputs, 2e-5, what + ": outputs");
    num_cached += count;
  }
}

INSTANTIATE_TEST_SUITE_P(AttentionKinds, DeepseekV4MtpLayer,
                         ::testing::Values("sliding_attention", "compressed_sparse_attention"),
                         [](const auto& info) { return info.param == "sliding_attention" ? "Sliding" : "Csa"; });

TEST(DeepseekV4Mtp, ACheckpointWithoutTheBlockIsRefusedNamingWhy) {
  auto backend = make_cpu_backend(1);
  try {
    load_mtp_model(fixtures_dir() / "models" / "deepseek_v4", *backend);
    ADD_FAILURE() << "the fixture, without mtp.0.*, was loaded";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("lacks mtp.0.e_proj.weight"), std::string::npos) << message;
    EXPECT_NE(message.find("transformers' checkpoints hold none"), std::string::npos) << message;
  }
}

}  // namespace
}  // namespace tern
