// Online FP8 (--quantization fp8): a bf16 fixture model loaded with it gives on the CPU the logits of its FP8 twin
// (fp8_twin.h: the same 128x128-block rule, written to disk as a block-FP8 checkpoint), on llama, qwen3, qwen3_moe,
// deepseek_v3 (MLA's kv_b_proj dequantized on the host) and deepseek_v4, under tensor parallelism and through the
// CLI. A block-FP8 checkpoint loads as it is; an MXFP4 checkpoint is refused, saying why.
#include <gtest/gtest.h>

#include <iostream>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/error.h"
#include "engine/sharded_model.h"
#include "fixtures.h"
#include "fp8_twin.h"
#include "model/model.h"
#include "model/sequence_runner.h"
#include "quantized_checkpoint.h"
#include "run_command.h"
#include "sharded_greedy.h"

namespace tern {
namespace {

namespace fs = std::filesystem;
using testing::cpu_logits;
using testing::is_linear_weight;
using testing::relative_error;
using testing::Twins;
using testing::TwinWriter;

fs::path fixture(const std::string& name) { return testing::fixtures_dir() / "models" / name; }

std::vector<int32_t> long_prompt(const fs::path& fixture) {
  return testing::read_json(fixture / "golden.json")["prompts"].back().get<std::vector<int32_t>>();
}

std::vector<float> online_fp8_logits(const fs::path& dir, const std::vector<int32_t>& ids) {
  auto backend = make_cpu_backend(2);
  auto model = load_model(dir, *backend, nullptr, OnlineQuantization::fp8);
  SequenceRunner runner(*model, *backend, static_cast<int64_t>(ids.size()));
  return backend->to_host_f32(runner.append(ids, true));
}

std::string online_fp8_error(const fs::path& dir) {
  try {
    auto backend = make_cpu_backend(1);
    load_model(dir, *backend, nullptr, OnlineQuantization::fp8);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

class OnlineFp8Test : public ::testing::TestWithParam<std::string> {};

TEST_P(OnlineFp8Test, LogitsEqualThoseOfTheFp8CheckpointOfTheSameWeights) {
  const std::string& name = GetParam();
  // MoE models route every token to every expert here, so that the error printed against bf16 measures the
  // quantization, not an expert choice that a near-tie flips.
  const bool moe = testing::read_json(fixture(name) / "config.json").contains("num_experts_per_tok");
  const fs::path model = moe ? testing::every_expert_routed(fixture(name), "online_fp8_" + name) : fixture(name);
  const Twins twins = TwinWriter(model, DType::F32).write("online_" + name);
  const auto prompt = long_prompt(model);
  const auto online = online_fp8_logits(model, prompt);
  EXPECT_LE(relative_error(online, cpu_logits(twins.fp8, prompt)), 1e-5f) << name;
  const float quantization_error = relative_error(online, cpu_logits(model, prompt));
  std::cout << name << ": online FP8 logits vs bf16, relative error " << quantization_error << "\n";
  EXPECT_GT(quantization_error, 0.0f) << "the weights should have been quantized";
}

INSTANTIATE_TEST_SUITE_P(Fixtures, OnlineFp8Test, ::testing::Values("llama", "qwen3", "qwen3_moe", "deepseek_v3"));

// gpt-oss's bf16 experts ([E, in, out], transposed on the host) quantize too, each expert's [out, in] on a grid of
// its own: the fixture's 64-row down projections end on a partial block each, so one grid over the experts' stacked
// rows would put two experts in a block and give other logits.
TEST(OnlineFp8GptOssTest, ExpertsQuantizeOnGridsOfTheirOwn) {
  const fs::path model = testing::every_expert_routed(fixture("gpt_oss"), "online_fp8_gpt_oss");
  const auto prompt = long_prompt(model);
  const auto online = online_fp8_logits(model, prompt);
  const Twins twins = TwinWriter(model, DType::F32).write("online_gpt_oss");
  EXPECT_LE(relative_error(online, cpu_logits(twins.f32, prompt)), 1e-5f);
  const Twins attention_only = TwinWriter(model, DType::F32, [](const TensorInfo& t) {
                                 return is_linear_weight(t) && !testing::is_gpt_oss_experts(t);
                               }).write("online_gpt_oss_attention");
  const float experts_error = relative_error(online, cpu_logits(attention_only.f32, prompt));
  std::cout << "gpt_oss: online FP8 logits vs its attention alone quantized, relative error " << experts_error << "\n";
  EXPECT_GT(experts_error, 1e-4f) << "the experts should have been quantized";
}

// DeepSeek-V4's linear weights in transformers' names: the attention's projections, the indexer's query projection
// and the routed and shared experts' (w1, w2, w3). The compressors' projections, the router and mHC's mixes load
// unquantized, as in DeepSeek's released checkpoints.
bool is_v4_linear_weight(const TensorInfo& t) {
  if (t.shape.size() != 2 || t.name.find(".compressor.") != std::string::npos) return false;
  for (const char* suffix : {".attn.wq_a.weight", ".attn.wq_b.weight", ".attn.wkv.weight", ".attn.wo_a.weight",
                             ".attn.wo_b.weight", ".indexer.wq_b.weight", ".w1.weight", ".w2.weight", ".w3.weight"}) {
    if (t.name.ends_with(suffix)) return true;
  }
  return false;
}

// A bf16 DeepSeek-V4 (hash-routed first layers, so its routing is left as it is) gives under online FP8 the logits
// of the block-FP8 checkpoint of the same weights.
TEST(OnlineFp8V4Test, LogitsEqualThoseOfTheFp8CheckpointOfTheSameWeights) {
  const Twins twins = TwinWriter(fixture("deepseek_v4"), DType::F32, is_v4_linear_weight).write("online_deepseek_v4");
  const auto prompt = long_prompt(fixture("deepseek_v4"));
  const auto online = online_fp8_logits(fixture("deepseek_v4"), prompt);
  EXPECT_LE(relative_error(online, cpu_logits(twins.fp8, prompt)), 1e-5f);
  const float quantization_error = relative_error(online, cpu_logits(fixture("deepseek_v4"), prompt));
  std::cout << "deepseek_v4: online FP8 logits vs bf16, relative error " << quantization_error << "\n";
  EXPECT_GT(quantization_error, 0.0f) << "the weights should have been quantized";
}

// llama's 160 gate/up rows split at 80, inside a 128-row block: each rank must see the whole weight's grid.
TEST(OnlineFp8ShardTest, TensorParallelRanksQuantizeAsTheFp8Checkpoint) {
  const Twins twins = TwinWriter(fixture("llama"), DType::F32).write("online_tp_llama");
  const auto prompt = long_prompt(fixture("llama"));
  auto online =
      ShardedModel::load(fixture("llama"), "cpu", {.tensor_parallel_size = 2}, 2, {}, OnlineQuantization::fp8);
  auto checkpoint = ShardedModel::load(twins.fp8, "cpu", {.tensor_parallel_size = 2}, 2);
  EXPECT_LE(relative_error(testing::prompt_logits(*online, prompt), testing::prompt_logits(*checkpoint, prompt)),
            1e-5f);
}

// Expert load balancing reloads experts from the checkpoint: quantized again, so the outputs stay those of FP8.
TEST(OnlineFp8ShardTest, ExpertsPlacedAnewAreQuantizedToo) {
  const fs::path dir = fixture("qwen3_moe");
  const auto prompt = long_prompt(dir);
  auto sharded = ShardedModel::load(dir, "cpu", {.tensor_parallel_size = 2, .expert_parallel_size = 2,
                                                 .num_redundant_experts = 2}, 2, {}, OnlineQuantization::fp8);
  const auto before = testing::prompt_logits(*sharded, prompt);
  std::vector<std::vector<int64_t>> skewed = sharded->take_expert_loads();  // expert 1 busiest: it is replicated
  for (auto& layer : skewed) layer[1] += 1000;
  sharded->place_experts(skewed);
  EXPECT_LE(relative_error(testing::prompt_logits(*sharded, prompt), before), 1e-5f);
}

// The load progress counts the checkpoint's bytes, not the smaller FP8 ones the backend receives.
TEST(OnlineFp8ProgressTest, CountsTheCheckpointBytes) {
  const auto loaded_bytes = [](OnlineQuantization quantization) {
    int64_t loaded = 0;
    ShardedModel::load(fixture("qwen3_moe"), "cpu", {}, 1,
                       [&](int64_t bytes, int64_t, double, bool) { loaded = bytes; }, quantization);
    return loaded;
  };
  EXPECT_EQ(loaded_bytes(OnlineQuantization::fp8), loaded_bytes(OnlineQuantization::none));
}

// As vLLM does, a block-FP8 checkpoint loads as it is: its unquantized linear weights (attention here) stay bf16.
TEST(OnlineFp8CheckpointTest, ABlockFp8CheckpointLoadsAsItIs) {
  const Twins twins = TwinWriter(fixture("llama"), DType::BF16, [](const TensorInfo& t) {
                        return is_linear_weight(t) && t.name.find(".mlp.") != std::string::npos;
                      }).write("online_partial_llama");
  const auto prompt = long_prompt(fixture("llama"));
  EXPECT_EQ(relative_error(online_fp8_logits(twins.fp8, prompt), cpu_logits(twins.fp8, prompt)), 0.0f);
}

TEST(OnlineFp8CheckpointTest, RefusesMxfp4) {
  const Twins mxfp4 = TwinWriter(fixture("llama"), DType::F32, [](const TensorInfo&) { return false; })
                          .write("online_mxfp4", {{"quant_method", "mxfp4"}});
  const std::string error = online_fp8_error(mxfp4.fp8);
  EXPECT_NE(error.find("config.json: --quantization fp8: the checkpoint is already quantized, as MXFP4 "
                       "(quantization_config.quant_method 'mxfp4')"), std::string::npos) << error;
}

// tern-py-13m through `tern generate`: --quantization fp8 writes the text of its FP8 twin; an unknown method fails.
TEST(OnlineFp8CliTest, GenerateWithQuantizationFp8) {
  const Twins twins = TwinWriter(fixture("tern-py-13m"), DType::F32).write("online_tern_py_13m");
  const auto generate = [](const fs::path& dir, const std::string& quantization) {
    return testing::run_command({testing::tern_binary().string(), "generate", "--model", dir.string(), "--backend",
                                 "cpu", "--prompt", "def parse_args(", "--max-tokens", "24", "--quantization",
                                 quantization});
  };
  const auto online = generate(fixture("tern-py-13m"), "fp8");
  ASSERT_EQ(online.exit_code, 0) << online.output;
  EXPECT_GT(online.output.size(), 8u);
  const auto checkpoint = generate(twins.fp8, "none");
  ASSERT_EQ(checkpoint.exit_code, 0) << checkpoint.output;
  EXPECT_EQ(online.output, checkpoint.output);
  EXPECT_NE(generate(fixture("tern-py-13m"), "int4").exit_code, 0);
}

}  // namespace
}  // namespace tern
