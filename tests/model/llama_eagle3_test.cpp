// EAGLE-3 (src/model/arch/llama_eagle3.h) against float64 references from the checkpoints (tests/eagle3_reference.h):
// a Llama target's layer inputs (Model::forward_with_layer_inputs), which leave its logits as a plain forward's; a
// random head's steps (fc over the target's three layer inputs, the layer over [embedding, hidden state], the
// pre-norm output a chained draft reads, the draft vocabulary's logits and d2t), with the target's embedding and
// with its own; the target layers read by default and as config.json names them; and heads that do not fit their
// target refused naming why.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <random>

#include "core/error.h"
#include "eagle3_checkpoint.h"
#include "eagle3_reference.h"
#include "fixtures.h"
#include "engine/sharded_model.h"
#include "model/arch/llama_eagle3.h"
#include "model/model.h"

namespace tern {
namespace {

using testing::batch_of;
using testing::eagle3_head;
using testing::Eagle3HeadOptions;
using testing::expect_near;
using testing::fixtures_dir;
using testing::kEagle3DraftVocab;
using testing::Matrix;

constexpr int64_t kHidden = 64;  // the fixtures'

class TargetLayerInputs : public ::testing::TestWithParam<std::string> {};

TEST_P(TargetLayerInputs, AreTheResidualStreamEnteringEachLayerAndLeaveTheLogitsAlone) {
  const auto dir = fixtures_dir() / "models" / GetParam();
  auto backend = make_cpu_backend(2);
  auto model = load_model(dir, *backend);
  ASSERT_TRUE(model->returns_layer_inputs());
  const std::vector<int32_t> tokens = {22, 506, 217, 201, 137, 437, 489};
  const auto want = testing::reference_layer_inputs(dir, tokens);
  ASSERT_EQ(want.size(), 3u);
  const ForwardBatch batch = batch_of(tokens, 0, 1);
  KvCache plain_cache = backend->allocate_kv_cache(model->kv_layers(), 1, 16);
  const std::vector<float> logits = backend->to_host_f32(model->forward(*backend->begin_step(batch), plain_cache));
  for (const std::vector<int32_t>& layers : std::vector<std::vector<int32_t>>{{0, 1, 2}, {1}, {0, 2}}) {
    KvCache cache = backend->allocate_kv_cache(model->kv_layers(), 1, 16);
    Tensor inputs;
    const Tensor with_inputs = model->forward_with_layer_inputs(*backend->begin_step(batch), cache, layers, inputs);
    EXPECT_EQ(backend->to_host_f32(with_inputs), logits);
    ASSERT_EQ(inputs.shape, (std::vector<int64_t>{7, static_cast<int64_t>(layers.size()) * kHidden}));
    const std::vector<float> got = backend->to_host_f32(inputs);
    for (size_t i = 0; i < layers.size(); ++i) {
      std::vector<float> columns;
      for (size_t t = 0; t < tokens.size(); ++t) {
        const auto row = got.begin() + static_cast<int64_t>((t * layers.size() + i) * kHidden);
        columns.insert(columns.end(), row, row + kHidden);
      }
      expect_near(columns, want[static_cast<size_t>(layers[i])], 1e-4,
                  GetParam() + ": input of layer " + std::to_string(layers[i]));
    }
  }
  KvCache cache = backend->allocate_kv_cache(model->kv_layers(), 1, 16);
  Tensor inputs;
  EXPECT_THROW(model->forward_with_layer_inputs(*backend->begin_step(batch), cache, std::vector<int32_t>{2, 1}, inputs),
               Error);
  EXPECT_THROW(model->forward_with_layer_inputs(*backend->begin_step(batch), cache, std::vector<int32_t>{3}, inputs),
               Error);
}

INSTANTIATE_TEST_SUITE_P(LlamaTargets, TargetLayerInputs, ::testing::Values("llama", "llama3_rope"));

class Eagle3Head : public ::testing::TestWithParam<bool> {};

TEST_P(Eagle3Head, MatchesItsDefinitionOverTwoStepsAndAChainedDraft) {
  const bool own_embedding = GetParam();
  const auto target_dir = fixtures_dir() / "models" / "llama";
  const auto dir = eagle3_head("llama", {.own_embedding = own_embedding});
  auto backend = make_cpu_backend(2);
  auto target = load_model(target_dir, *backend);
  auto head = load_eagle3_model(dir, *target, *backend);
  EXPECT_EQ(head->target_layer_inputs(), (std::vector<int32_t>{0, 1, 2}));
  ASSERT_EQ(head->kv_layers().size(), 1u);
  KvCache cache = backend->allocate_kv_cache(head->kv_layers(), 2, 16);
  testing::ReferenceEagle3Head reference(dir, target_dir);
  std::mt19937 rng(7);
  std::normal_distribution<double> normal(0.0, 1.5);
  const std::vector<int32_t> tokens = {22, 506, 217, 201, 137, 437, 489, 3, 511};
  Matrix target_states(tokens.size() * 3 * kHidden);
  for (double& v : target_states) v = normal(rng);
  const auto to_tensor = [&](const Matrix& m, int64_t width) {
    return backend->from_host_f32(std::vector<float>(m.begin(), m.end()), {static_cast<int64_t>(m.size()) / width, width});
  };
  // Seven entries from the target's states, then two more over the cached ones.
  int32_t num_cached = 0;
  std::vector<float> last_outputs;
  for (int32_t count : {7, 2}) {
    const std::vector<int32_t> step_tokens(tokens.begin() + num_cached, tokens.begin() + num_cached + count);
    const Matrix states(target_states.begin() + num_cached * 3 * kHidden,
                        target_states.begin() + (num_cached + count) * 3 * kHidden);
    Tensor outputs;
    const Tensor logits =
        head->forward(*backend->begin_step(batch_of(step_tokens, num_cached, 2)), cache, to_tensor(states, 3 * kHidden),
                      outputs);
    const auto want = reference.step(step_tokens, static_cast<size_t>(num_cached), states);
    const std::string what = "step from " + std::to_string(num_cached) + (own_embedding ? ", own embedding" : "");
    ASSERT_EQ(logits.shape, (std::vector<int64_t>{count, kEagle3DraftVocab})) << what;
    expect_near(backend->to_host_f32(logits), want.logits, 1e-4, what + ": logits");
    last_outputs = backend->to_host_f32(outputs);
    expect_near(last_outputs, want.outputs, 1e-4, what + ": pre-norm outputs");
    num_cached += count;
  }
  // A draft after a draft: the entry at position 9 reads the head's own output at position 8.
  const Matrix chained(last_outputs.end() - kHidden, last_outputs.end());
  Tensor outputs;
  const Tensor logits =
      head->forward(*backend->begin_step(batch_of({300}, 9, 2)), cache, to_tensor(chained, kHidden), outputs);
  const auto want = reference.step({300}, 9, chained);
  expect_near(backend->to_host_f32(logits), want.logits, 1e-4, "chained draft: logits");
  expect_near(backend->to_host_f32(outputs), want.outputs, 1e-4, "chained draft: pre-norm outputs");
  // Draft id d is the target's d + d2t[d].
  const Checkpoint checkpoint = Checkpoint::open(dir);
  const TensorInfo& d2t = checkpoint.get("d2t");
  for (int32_t d = 0; d < kEagle3DraftVocab; ++d) {
    int64_t offset = 0;
    std::memcpy(&offset, d2t.data + d * sizeof(int64_t), sizeof(offset));
    EXPECT_EQ(head->target_token_id(d), d + offset) << d;
  }
}

// Under tensor parallelism every rank loads the head, its layer sharded and a shared embedding the rank's
// vocab-parallel shard of the target's: every rank's logits and outputs are still the definition's.
TEST_P(Eagle3Head, OnTwoTensorParallelRanksMatchesItsDefinition) {
  const bool own_embedding = GetParam();
  const auto target_dir = fixtures_dir() / "models" / "llama";
  const auto dir = eagle3_head("llama", {.own_embedding = own_embedding});
  auto ranks = ShardedModel::load(target_dir, "cpu", {.tensor_parallel_size = 2}, 2);
  std::vector<std::unique_ptr<MtpModel>> heads(2);
  ranks->run_on_ranks(
      [&](int rank) { heads[rank] = load_eagle3_model(dir, ranks->model(rank), ranks->backend(rank)); });
  testing::ReferenceEagle3Head reference(dir, target_dir);
  std::mt19937 rng(8);
  std::normal_distribution<double> normal(0.0, 1.5);
  const std::vector<int32_t> tokens = {22, 506, 217, 201, 137, 437, 489};
  Matrix states(tokens.size() * 3 * kHidden);
  for (double& v : states) v = normal(rng);
  std::vector<std::vector<float>> logits(2), outputs(2);
  ranks->run_on_ranks([&](int rank) {
    Backend& backend = ranks->backend(rank);
    KvCache cache = backend.allocate_kv_cache(heads[rank]->kv_layers(), 1, 16);
    Tensor out;
    const Tensor rank_logits = heads[rank]->forward(
        *backend.begin_step(batch_of(tokens, 0, 1)), cache,
        backend.from_host_f32(std::vector<float>(states.begin(), states.end()),
                              {static_cast<int64_t>(tokens.size()), 3 * kHidden}),
        out);
    logits[rank] = backend.to_host_f32(rank_logits);
    outputs[rank] = backend.to_host_f32(out);
  });
  const auto want = reference.step(tokens, 0, states);
  for (int rank = 0; rank < 2; ++rank) {
    const std::string what = "rank " + std::to_string(rank) + (own_embedding ? ", own embedding" : "");
    expect_near(logits[rank], want.logits, 1e-4, what + ": logits");
    expect_near(outputs[rank], want.outputs, 1e-4, what + ": pre-norm outputs");
  }
}

INSTANTIATE_TEST_SUITE_P(Embeddings, Eagle3Head, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "OwnEmbedding" : "TargetsEmbedding"; });

void expect_error_naming(const std::function<void()>& run, const std::string& what) {
  try {
    run();
    ADD_FAILURE() << "accepted; expected an error naming '" << what << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
  }
}

TEST(Eagle3TargetLayers, AreVllmsDefaultOrTheOnesConfigJsonNamesInLayerOrder) {
  EXPECT_EQ(eagle3_target_layers(nlohmann::json::object(), 32, "head"), (std::vector<int32_t>{2, 16, 29}));
  EXPECT_EQ(eagle3_target_layers(nlohmann::json::object(), 8, "head"), (std::vector<int32_t>{2, 4, 5}));
  EXPECT_EQ(eagle3_target_layers({{"eagle_aux_hidden_state_layer_ids", {20, 1, 39}}}, 40, "head"),
            (std::vector<int32_t>{1, 20, 39}));
  EXPECT_EQ(eagle3_target_layers({{"eagle_config", {{"eagle_aux_hidden_state_layer_ids", {0, 1, 2}}}}}, 2, "head"),
            (std::vector<int32_t>{0, 1, 2}));
  expect_error_naming([] { eagle3_target_layers(nlohmann::json::object(), 2, "head"); },
                      "the default (2, L/2, L-3) (-1, 1, 2) for a target of 2 layers");
  expect_error_naming([] { eagle3_target_layers({{"eagle_aux_hidden_state_layer_ids", {0, 1, 1}}}, 8, "head"); },
                      "three distinct target layers in [0, 8]");
  expect_error_naming([] { eagle3_target_layers({{"eagle_aux_hidden_state_layer_ids", {0, 1, 9}}}, 8, "head"); },
                      "three distinct target layers in [0, 8]");
  expect_error_naming([] { eagle3_target_layers({{"eagle_aux_hidden_state_layer_ids", "2,4,5"}}, 8, "head"); },
                      "must be a list of layer indices");
}

TEST(Eagle3Head, HeadsThatDoNotFitTheirTargetAreRefusedNamingWhy) {
  auto backend = make_cpu_backend(1);
  auto llama = load_model(fixtures_dir() / "models" / "llama", *backend);
  const auto load = [&](const std::filesystem::path& dir, const Model& target) {
    return [&backend, dir, &target] { load_eagle3_model(dir, target, *backend); };
  };
  expect_error_naming(load(eagle3_head("llama", {.hidden_size = 32}), *llama),
                      "the head's hidden size 32 (target_hidden_size 32) differs from the target's 64");
  expect_error_naming(load(eagle3_head("llama", {.num_d2t_entries = 100}), *llama),
                      "d2t has 100 entries and the draft vocabulary 128");
  expect_error_naming(load(eagle3_head("llama", {.names_layers = false}), *llama),
                      "(-1, 1, 2) for a target of 2 layers; config.json may name them");
  expect_error_naming(load(fixtures_dir() / "models" / "llama", *llama), "names LlamaForCausalLMEagle3");
  auto v4 = load_model(fixtures_dir() / "models" / "deepseek_v4", *backend);
  expect_error_naming(load(eagle3_head("llama"), *v4), "does not hand out its layers' inputs");
}

}  // namespace
}  // namespace tern
