// DeepSeek-V3's multi-token prediction layer (src/model/arch/deepseek_mtp.h) against its definition, composed here
// in float64 around the decoder layer's blocks (MLA and MoE, checked against transformers by the golden tests):
// enorm and hnorm, the concatenation [embedding, hidden state] through eh_proj, the residual stream, the shared
// head's norm and head. And the target's hidden states (Model::forward_with_hidden_states) against the lm_head.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/error.h"
#include "fixtures.h"
#include "model/arch/deepseek_v3.h"
#include "model/checkpoint.h"
#include "model/model.h"
#include "model/mtp_model.h"
#include "model/weight_loader.h"
#include "mtp_checkpoint.h"
#include "mtp_layer_reference.h"
#include "quantized_checkpoint.h"

namespace tern {
namespace {

using testing::deepseek_v3_with_mtp;
using testing::fixtures_dir;
using testing::MtpLayerKind;
using testing::Matrix;
using testing::batch_of;
using testing::relative_error;
using testing::checkpoint_values;
using testing::expect_near;
using testing::linear;
using testing::rms_norm;

TEST(DeepseekMtp, TargetHiddenStatesAreTheLmHeadInput) {
  const auto dir = fixtures_dir() / "models" / "deepseek_v3";
  auto backend = make_cpu_backend(2);
  auto model = load_model(dir, *backend);
  const auto [logits, hidden] = testing::target_step(*model, *backend, {22, 506, 217, 201, 137, 437, 489});
  ASSERT_EQ(hidden.shape, (std::vector<int64_t>{7, 64}));
  const std::vector<float> rows = backend->to_host_f32(hidden);
  const Checkpoint checkpoint = Checkpoint::open(dir);
  expect_near(logits, linear(Matrix(rows.begin(), rows.end()), checkpoint_values(checkpoint, "lm_head.weight"), 64),
              1e-4, "lm_head(hidden states)");
}

// The layer's step over `tokens` (entries from position num_cached on, with their hidden states) composed in float64
// around the layer's blocks, which run on their own cache: logits [T, vocab] and the head's input [T, hidden].
class ReferenceMtpLayer {
 public:
  ReferenceMtpLayer(const std::filesystem::path& dir, Backend& backend)
      : config_(ModelConfig::load(dir)), checkpoint_(Checkpoint::open(dir)), backend_(backend) {
    const std::string layer = "model.layers." + std::to_string(config_.num_layers);
    WeightLoader weights(checkpoint_, backend);
    layer_.attention_norm = weights.load(layer + ".input_layernorm.weight", {64});
    layer_.feed_forward_norm = weights.load(layer + ".post_attention_layernorm.weight", {64});
    deepseek_v3_layer_builder(config_, backend)(weights, config_.num_layers, layer, layer_);
    cache_ = backend.allocate_kv_cache({layer_.attention->kv_spec()}, 2, 16);
    embed_ = checkpoint_values(checkpoint_, checkpoint_.has(layer + ".embed_tokens.weight")
                                                ? layer + ".embed_tokens.weight"
                                                : "model.embed_tokens.weight");
    enorm_ = checkpoint_values(checkpoint_, layer + ".enorm.weight");
    hnorm_ = checkpoint_values(checkpoint_, layer + ".hnorm.weight");
    eh_proj_ = checkpoint_values(checkpoint_, layer + ".eh_proj.weight");
    head_norm_ = checkpoint_values(checkpoint_, layer + ".shared_head.norm.weight");
    head_ = checkpoint_values(checkpoint_, layer + ".shared_head.head.weight");
  }

  std::pair<Matrix, Matrix> step(const std::vector<int32_t>& tokens, int32_t num_cached, const Matrix& hidden) {
    const size_t h = 64;
    const double eps = config_.rms_norm_eps;
    Matrix embedded;
    for (int32_t t : tokens) embedded.insert(embedded.end(), embed_.begin() + t * h, embed_.begin() + (t + 1) * h);
    const Matrix e = rms_norm(embedded, enorm_, eps), p = rms_norm(hidden, hnorm_, eps);
    Matrix concatenated;
    for (size_t r = 0; r < tokens.size(); ++r) {
      concatenated.insert(concatenated.end(), e.begin() + r * h, e.begin() + (r + 1) * h);
      concatenated.insert(concatenated.end(), p.begin() + r * h, p.begin() + (r + 1) * h);
    }
    const Matrix x = linear(concatenated, eh_proj_, 2 * h);
    const ForwardBatch batch = batch_of(tokens, num_cached, 2);
    const auto context = backend_.begin_step(batch);
    const float eps32 = static_cast<float>(eps);
    Tensor residual =
        backend_.from_host_f32(std::vector<float>(x.begin(), x.end()), {static_cast<int64_t>(tokens.size()), 64});
    const Tensor attended = layer_.attention->forward(
        backend_, BlockInput(backend_, residual, std::nullopt, layer_.attention_norm, eps32), cache_, 0, *context);
    const Tensor mixed = layer_.feed_forward->forward(
        backend_, BlockInput(backend_, residual, attended, layer_.feed_forward_norm, eps32), *context);
    const std::vector<float> after_attention = backend_.to_host_f32(residual), ffn = backend_.to_host_f32(mixed);
    Matrix out(x.size());
    for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<double>(after_attention[i]) + ffn[i];
    const Matrix normalized = rms_norm(out, head_norm_, eps);
    return {linear(normalized, head_, h), normalized};
  }

 private:
  ModelConfig config_;
  Checkpoint checkpoint_;
  Backend& backend_;
  DecoderLayer layer_;
  KvCache cache_;
  Matrix embed_, enorm_, hnorm_, eh_proj_, head_norm_, head_;
};

class DeepseekMtpLayer : public ::testing::TestWithParam<bool> {};

TEST_P(DeepseekMtpLayer, MatchesItsDefinitionOverTwoSteps) {
  const bool own_embedding = GetParam();
  const auto dir = deepseek_v3_with_mtp(MtpLayerKind::random, own_embedding);
  auto backend = make_cpu_backend(2);
  auto mtp = load_mtp_model(dir, *backend);
  ASSERT_EQ(mtp->kv_layers().size(), 1u);
  KvCache cache = backend->allocate_kv_cache(mtp->kv_layers(), 2, 16);
  ReferenceMtpLayer reference(dir, *backend);
  std::mt19937 rng(5);
  std::normal_distribution<double> normal(0.0, 1.5);
  const std::vector<int32_t> tokens = {22, 506, 217, 201, 137, 437, 489, 3, 511};
  Matrix hidden(tokens.size() * 64);
  for (double& v : hidden) v = normal(rng);
  // Seven entries, then two more over the cached ones.
  int32_t num_cached = 0;
  for (int32_t count : {7, 2}) {
    const std::vector<int32_t> step_tokens(tokens.begin() + num_cached, tokens.begin() + num_cached + count);
    const Matrix step_hidden(hidden.begin() + num_cached * 64, hidden.begin() + (num_cached + count) * 64);
    const ForwardBatch batch = batch_of(step_tokens, num_cached, 2);
    Tensor outputs;
    const Tensor logits =
        mtp->forward(*backend->begin_step(batch), cache,
                     backend->from_host_f32(std::vector<float>(step_hidden.begin(), step_hidden.end()), {count, 64}),
                     outputs);
    const auto [want_logits, want_outputs] = reference.step(step_tokens, num_cached, step_hidden);
    const std::string what = "step from " + std::to_string(num_cached) + (own_embedding ? ", own embedding" : "");
    expect_near(backend->to_host_f32(logits), want_logits, 1e-4, what + ": logits");
    expect_near(backend->to_host_f32(outputs), want_outputs, 1e-5, what + ": outputs");
    num_cached += count;
  }
}

INSTANTIATE_TEST_SUITE_P(Embeddings, DeepseekMtpLayer, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "OwnEmbedding" : "TargetsEmbedding"; });

// Loaded with online FP8 (the target's --quantization fp8, or "quantization": "fp8"), the layer's projections are
// block FP8: its logits move from the bf16 layer's by the size of the quantization, not more.
TEST(DeepseekMtpLayerFp8, LoadsItsProjectionsAsFp8) {
  const auto dir = deepseek_v3_with_mtp(MtpLayerKind::random, false);
  auto backend = make_cpu_backend(2);
  const std::vector<int32_t> tokens = {22, 506, 217, 201, 137, 437, 489};
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.5f);
  std::vector<float> hidden(tokens.size() * 64);
  for (float& v : hidden) v = normal(rng);
  const auto logits = [&](OnlineQuantization quantization) {
    auto mtp = load_mtp_model(dir, *backend, quantization);
    KvCache cache = backend->allocate_kv_cache(mtp->kv_layers(), 2, 16);
    Tensor outputs;
    const auto count = static_cast<int64_t>(tokens.size());
    return backend->to_host_f32(mtp->forward(*backend->begin_step(batch_of(tokens, 0, 2)), cache,
                                             backend->from_host_f32(hidden, {count, 64}), outputs));
  };
  const float relative = relative_error(logits(OnlineQuantization::fp8), logits(OnlineQuantization::none));
  EXPECT_GT(relative, 1e-4f) << "the layer's weights should have been quantized";
  EXPECT_LT(relative, 0.1f);
}

void expect_refused(const std::filesystem::path& dir, const std::string& what) {
  auto backend = make_cpu_backend(1);
  try {
    load_mtp_model(dir, *backend);
    ADD_FAILURE() << dir << " was loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
  }
}

TEST(DeepseekMtp, CheckpointsWithoutTheLayerAreRefusedNamingWhy) {
  // The fixture declares num_nextn_predict_layers but was saved without the layer (transformers drops it).
  expect_refused(fixtures_dir() / "models" / "deepseek_v3", "lacks model.layers.3.eh_proj.weight");
  expect_refused(fixtures_dir() / "models" / "llama", "not LlamaForCausalLM");
}

}  // namespace
}  // namespace tern
