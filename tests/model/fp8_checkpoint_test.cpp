// Block-FP8 checkpoints (DeepSeek-V3's format): quantized twins of the bf16 fixture models (fp8_twin.h: 128x128
// blocks; the fixtures' dimensions leave partial edge blocks), give on the CPU backend the logits of their exactly
// dequantized float32 twins, land near the bf16 originals' (the relative error is printed), shard under tensor
// parallelism, and generate text through the CLI. Every malformed quantized checkpoint fails at load, naming the
// file and tensor or config field.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <deque>
#include <fstream>
#include <functional>
#include <iostream>

#include "backend/backend.h"
#include "core/error.h"
#include "fixtures.h"
#include "fp8_twin.h"
#include "golden_logits.h"
#include "model/model.h"
#include "model/safetensors.h"
#include "model/sequence_runner.h"
#include "quantized_checkpoint.h"
#include "run_command.h"
#include "sharded_greedy.h"

namespace tern {
namespace {

namespace fs = std::filesystem;
using testing::cpu_logits;
using testing::fixtures_dir;
using testing::fp8_quantization_config;
using testing::is_linear_weight;
using testing::load_error;
using testing::relative_error;
using testing::read_json;
using testing::Twins;
using testing::TwinWriter;

fs::path fixture(const std::string& name) { return fixtures_dir() / "models" / name; }

std::vector<int32_t> long_prompt(const fs::path& fixture) {
  const auto golden = read_json(fixture / "golden.json");
  return golden["prompts"].back().get<std::vector<int32_t>>();
}

struct TwinCase {
  std::string model;
  DType scale_dtype;
};

void PrintTo(const TwinCase& c, std::ostream* os) { *os << c.model << " with " << dtype_name(c.scale_dtype) << " scales"; }

class Fp8TwinTest : public ::testing::TestWithParam<TwinCase> {};

TEST_P(Fp8TwinTest, LogitsEqualTheDequantizedTwinsAndStayNearTheBf16Originals) {
  const auto& [name, scale_dtype] = GetParam();
  // MoE models route every token to every expert here, so that the comparison with bf16 weights measures the
  // quantization, not an expert choice that a near-tie flips.
  const bool moe = read_json(fixture(name) / "config.json").contains("num_experts_per_tok");
  const std::string tag = name + "_" + std::string(dtype_name(scale_dtype));
  const TwinWriter writer(moe ? testing::every_expert_routed(fixture(name), "fp8_" + tag) : fixture(name), scale_dtype);
  const Twins twins = writer.write(tag);
  const auto prompt = long_prompt(writer.fixture());
  const auto fp8 = cpu_logits(twins.fp8, prompt);
  const auto f32 = cpu_logits(twins.f32, prompt);
  const auto bf16 = cpu_logits(writer.fixture(), prompt);
  EXPECT_LE(relative_error(fp8, f32), 1e-5f) << name;
  const float quantization_error = relative_error(fp8, bf16);
  std::cout << name << ", " << dtype_name(scale_dtype) << " scales: FP8 logits vs bf16 original, relative error "
            << quantization_error << "\n";
  RecordProperty("relative_error_vs_bf16", std::to_string(quantization_error));
  EXPECT_GT(quantization_error, 0.0f) << "the twin should differ from the bf16 weights";
  // e4m3 keeps 3 mantissa bits (each weight within 6.25% of itself); these random models land at 6-11% (max |diff|
  // over max |logit|), where a weight scaled by another block's scale would be off by its whole size.
  EXPECT_LE(quantization_error, 0.2f) << name;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Fp8TwinTest,
                         ::testing::Values(TwinCase{"llama", DType::F32}, TwinCase{"llama", DType::BF16},
                                           TwinCase{"llama", DType::F16}, TwinCase{"qwen3", DType::F32},
                                           TwinCase{"qwen3", DType::BF16}, TwinCase{"deepseek_v3", DType::F32},
                                           TwinCase{"deepseek_v3", DType::F16}, TwinCase{"qwen3_moe", DType::F32},
                                           TwinCase{"qwen3_moe", DType::BF16}));

// Shards start inside the 128x128 grid (llama's 160 gate/up rows split at 80; MoE experts' 32 at 16): each rank's
// view keeps the whole weight's blocks.
TEST(Fp8ShardTest, TensorParallelRanksGiveTheUnshardedLogits) {
  for (const std::string name : {"llama", "deepseek_v3", "qwen3_moe"}) {
    const Twins twins = TwinWriter(fixture(name), DType::F32).write("tp_" + name);
    const auto prompt = long_prompt(fixture(name));
    auto whole = ShardedModel::load(twins.fp8, "cpu", {}, 2);
    auto sharded = ShardedModel::load(twins.fp8, "cpu", {.tensor_parallel_size = 2}, 2);
    EXPECT_LE(relative_error(testing::prompt_logits(*sharded, prompt), testing::prompt_logits(*whole, prompt)), 1e-4f)
        << name;
  }
}

// A real model (tern-py-13m: intermediate 704 = 5 blocks and a half) through `tern generate --prompt`: the FP8
// checkpoint writes the text its dequantized twin writes.
TEST(Fp8GenerateTest, CliGeneratesFromAnFp8Checkpoint) {
  const Twins twins = TwinWriter(fixture("tern-py-13m"), DType::BF16).write("tern_py_13m");
  const auto generate = [](const fs::path& dir) {
    return testing::run_command({testing::tern_binary().string(), "generate", "--model", dir.string(), "--backend",
                                 "cpu", "--prompt", "def parse_args(", "--max-tokens", "24"});
  };
  const auto fp8 = generate(twins.fp8);
  ASSERT_EQ(fp8.exit_code, 0) << fp8.output;
  EXPECT_GT(fp8.output.size(), 8u);
  const auto f32 = generate(twins.f32);
  ASSERT_EQ(f32.exit_code, 0) << f32.output;
  EXPECT_EQ(fp8.output, f32.output);
}

// A block-FP8 checkpoint written by transformers itself (tests/data/README.md): the CPU's logits equal transformers'
// float64 forward over the dequantized weights to float32 rounding (2.8e-7 measured), and so do the greedy tokens.
TEST(TransformersFp8CheckpointTest, CpuMatchesItsFloat64ForwardOverTheDequantizedWeights) {
  testing::expect_cpu_meets_float64_goldens(testing::test_data_dir() / "qwen3_fp8");
}

// ---- Malformed checkpoints: each fails at load, naming what is wrong and where. ----

class Fp8LoadErrorTest : public ::testing::Test {
 protected:
  // The llama twin with its FP8 tensors changed by `edit` and quantization_config replaced by `quantization`.
  fs::path broken(const std::string& tag, const std::function<void(std::vector<TensorInfo>&)>& edit,
                  const nlohmann::json& quantization = fp8_quantization_config()) {
    edit(writer_.fp8_tensors());
    return writer_.write("broken_" + tag, quantization).fp8;
  }
  TensorInfo& tensor(std::vector<TensorInfo>& tensors, const std::string& name) {
    const auto it = std::find_if(tensors.begin(), tensors.end(), [&](const TensorInfo& t) { return t.name == name; });
    if (it == tensors.end()) fail("no tensor {}", name);
    return *it;
  }
  fs::path with_config(const std::string& tag, const nlohmann::json& quantization) {
    return broken(tag, [](auto&) {}, quantization);
  }

  TwinWriter writer_{fixture("llama"), DType::F32};
};

constexpr const char* kGate = "model.layers.0.mlp.gate_proj.weight";

TEST_F(Fp8LoadErrorTest, MissingScale) {
  const auto dir = broken("missing", [&](auto& tensors) {
    std::erase_if(tensors, [](const TensorInfo& t) { return t.name == std::string(kGate) + "_scale_inv"; });
  });
  const std::string error = load_error(dir);
  EXPECT_NE(error.find("model.safetensors"), std::string::npos) << error;
  EXPECT_NE(error.find("FP8 weight 'model.layers.0.mlp.gate_proj.weight' has no scale tensor "
                       "'model.layers.0.mlp.gate_proj.weight_scale_inv'"), std::string::npos) << error;
}

TEST_F(Fp8LoadErrorTest, MisshapenScale) {
  const auto dir = broken("shape", [&](auto& tensors) { tensor(tensors, std::string(kGate) + "_scale_inv").shape = {1, 2}; });
  const std::string error = load_error(dir);
  EXPECT_NE(error.find("model.safetensors: scale tensor 'model.layers.0.mlp.gate_proj.weight_scale_inv' has shape "
                       "[1, 2], expected [2, 1]"), std::string::npos) << error;
}

// transformers 5.17 saves the scales of MoE experts it quantized without their dimension of one block ([2] for a
// [2, 1] grid): such a scale is the same grid.
TEST_F(Fp8LoadErrorTest, ScaleSavedWithoutItsDimensionOfOneBlockLoads) {
  const auto ids = read_json(fixture("llama") / "golden.json")["prompts"][1].get<std::vector<int32_t>>();
  const auto as_written = cpu_logits(writer_.write("as_written", fp8_quantization_config()).fp8, ids);
  const auto squeezed =
      broken("squeezed", [&](auto& tensors) { tensor(tensors, std::string(kGate) + "_scale_inv").shape = {2}; });
  EXPECT_EQ(load_error(squeezed), "");
  EXPECT_EQ(cpu_logits(squeezed, ids), as_written);
}

TEST_F(Fp8LoadErrorTest, ScaleOfAWrongDtype) {
  const auto dir = broken("dtype", [&](auto& tensors) { tensor(tensors, std::string(kGate) + "_scale_inv").dtype = DType::I32; });
  const std::string error = load_error(dir);
  EXPECT_NE(error.find("model.safetensors: scale tensor 'model.layers.0.mlp.gate_proj.weight_scale_inv' is I32"),
            std::string::npos) << error;
  // Power-of-two scales as F8_E8M0 only where config.json says scale_fmt ue8m0.
  const auto e8m0 = broken("e8m0", [&](auto& tensors) {
    TensorInfo& scale = tensor(tensors, std::string(kGate) + "_scale_inv");
    scale.dtype = DType::F8_E8M0;
    scale.size_bytes = 2;
  });
  EXPECT_NE(load_error(e8m0).find("is F8_E8M0; block scales are F32, BF16 or F16"), std::string::npos);
}

TEST_F(Fp8LoadErrorTest, UnsupportedQuantizationConfig) {
  const auto config_error = [&](const std::string& tag, const std::function<void(nlohmann::json&)>& change) {
    nlohmann::json quantization = fp8_quantization_config();
    change(quantization);
    return load_error(with_config(tag, quantization));
  };
  const std::vector<std::pair<std::string, std::string>> cases = {
      {config_error("method", [](auto& q) { q["quant_method"] = "awq"; }), "quantization_config.quant_method 'awq'"},
      {config_error("fmt", [](auto& q) { q["fmt"] = "e5m2"; }), "quantization_config.fmt 'e5m2' is not supported"},
      {config_error("static", [](auto& q) { q["activation_scheme"] = "static"; }),
       "quantization_config.activation_scheme 'static' is not supported"},
      {config_error("block", [](auto& q) { q["weight_block_size"] = {64, 64}; }),
       "quantization_config.weight_block_size [64,64] is not supported (supported: [128, 128])"},
      {config_error("per_tensor", [](auto& q) { q.erase("weight_block_size"); }), "quantization_config has no weight_block_size: per-tensor FP8 is not supported"},
  };
  for (const auto& [error, expected] : cases) {
    EXPECT_NE(error.find("config.json: " + expected), std::string::npos) << error;
  }
}

TEST_F(Fp8LoadErrorTest, Fp8WithoutQuantizationConfig) {
  const std::string error = load_error(with_config("no_config", nullptr));
  EXPECT_NE(error.find("is F8_E4M3 but"), std::string::npos) << error;
  EXPECT_NE(error.find("has no fp8 quantization_config"), std::string::npos) << error;
}

TEST(Fp8RoleErrorTest, QuantizedTensorsWhereTheArchitectureTakesNone) {
  for (const std::string name : {"model.embed_tokens.weight", "lm_head.weight"}) {
    const Twins twins = TwinWriter(fixture("llama"), DType::F32, [&](const TensorInfo& t) { return is_linear_weight(t) || t.name == name; })
                            .write("role_" + name);
    const std::string error = load_error(twins.fp8);
    EXPECT_NE(error.find("model.safetensors: tensor '" + name + "' is block-quantized (F8_E4M3), but the "
                         "architecture takes an unquantized tensor here"), std::string::npos) << error;
  }
  const Twins router = TwinWriter(fixture("qwen3_moe"), DType::F32, [](const TensorInfo& t) {
                         return is_linear_weight(t) || t.name == "model.layers.1.mlp.gate.weight";
                       }).write("role_router");
  EXPECT_NE(load_error(router.fp8).find("tensor 'model.layers.1.mlp.gate.weight' is block-quantized"), std::string::npos);
}

TEST_F(Fp8LoadErrorTest, QuantizedNorm) {
  std::vector<std::byte> codes(64, std::byte{0x38});
  const float one = 1.0f;
  const auto dir = broken("norm", [&](auto& tensors) {
    TensorInfo& norm = tensor(tensors, "model.norm.weight");
    norm.dtype = DType::F8_E4M3;
    norm.data = codes.data();
    norm.size_bytes = codes.size();
    tensors.push_back({"model.norm.weight_scale_inv", {}, DType::F32, {1}, reinterpret_cast<const std::byte*>(&one), 4, {}});
  });
  const std::string error = load_error(dir);
  EXPECT_NE(error.find("model.safetensors: F8_E4M3 tensor 'model.norm.weight' has shape [64]; block-quantized "
                       "weights are 2-D"), std::string::npos) << error;
}

}  // namespace
}  // namespace tern
