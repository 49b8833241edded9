// DeepSeek-V4 in DeepSeek's released layout: the bf16 deepseek_v4 fixture converted by `tern convert-deepseek-v4`
// (v4_released_checkpoint.h) has the released names, dtypes and config.json; its FP8 blocks and FP4 experts hold the
// codes and power-of-two scales of DeepSeek's scheme, recomputed here from the fixture's values; loaded on the CPU
// backend it gives, over the golden prompts, the logits of its dequantized bf16 twin in transformers' layout (the
// same weights, the same summation order), with MTP tensors in the file or online FP8 asked for. Every malformed
// released checkpoint fails at load, naming the file and tensor or the config field.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>
#include <fstream>
#include <functional>
#include <iostream>
#include <iterator>
#include <map>

#include "backend/backend.h"
#include "core/error.h"
#include "fixtures.h"
#include "fp8_twin.h"
#include "model/arch/deepseek_v4/v4_released_checkpoint.h"
#include "model/model.h"
#include "model/safetensors.h"
#include "model/sequence_runner.h"
#include "model/weight_loader.h"
#include "quantized_checkpoint.h"
#include "run_command.h"

namespace tern {
namespace {

namespace fs = std::filesystem;
using testing::fixtures_dir;
using testing::load_error;
using testing::read_json;
using testing::relative_error;

fs::path fixture() { return fixtures_dir() / "models" / "deepseek_v4"; }

struct Converted {
  fs::path released;
  fs::path twin;
};

// A temporary directory named after `tag` and this process: CTest runs the cases of this file in parallel processes.
fs::path temp_dir(const std::string& tag) {
  return fs::path(::testing::TempDir()) / ("tern_v4_released_" + tag + "_" + std::to_string(::getpid()));
}

// Removes this process's temporary directories once its tests are done.
class TempDirCleanup : public ::testing::Environment {
 public:
  void TearDown() override {
    const std::string suffix = "_" + std::to_string(::getpid());
    std::error_code ignored;
    for (const auto& entry : fs::directory_iterator(::testing::TempDir(), ignored)) {
      const std::string name = entry.path().filename().string();
      if (name.starts_with("tern_v4_released_") && name.ends_with(suffix)) fs::remove_all(entry.path(), ignored);
    }
  }
};
[[maybe_unused]] const auto* const temp_dir_cleanup = ::testing::AddGlobalTestEnvironment(new TempDirCleanup);

// The fixture converted with `experts` into fresh temporary directories named after `tag`.
Converted convert(const std::string& tag, V4ExpertDtype experts) {
  const fs::path base = temp_dir(tag);
  fs::remove_all(base);
  V4ReleasedConversion conversion;
  conversion.expert_dtype = experts;
  conversion.dequantized_twin = base / "twin";
  write_v4_released_checkpoint(fixture(), base / "released", conversion);
  return {base / "released", base / "twin"};
}

const Converted& fp4_conversion() {
  static const Converted converted = convert("fp4", V4ExpertDtype::fp4);
  return converted;
}

// The CPU logits at every position of each golden prompt, one prompt after another, teacher-forced.
std::vector<float> golden_logits(const fs::path& dir, OnlineQuantization quantization = OnlineQuantization::none) {
  auto backend = make_cpu_backend(2);
  auto model = load_model(dir, *backend, nullptr, quantization);
  std::vector<float> all;
  const nlohmann::json golden = read_json(fixture() / "golden.json");
  for (const auto& prompt : golden["prompts"]) {
    const auto ids = prompt.get<std::vector<int32_t>>();
    SequenceRunner runner(*model, *backend, static_cast<int64_t>(ids.size()));
    const auto logits = backend->to_host_f32(runner.append(ids, true));
    all.insert(all.end(), logits.begin(), logits.end());
  }
  return all;
}

std::map<std::string, TensorInfo> tensors_of(const fs::path& file) {
  static std::deque<std::shared_ptr<const SafetensorsFile>> open_files;  // the tensors point into them
  return open_files.emplace_back(SafetensorsFile::open(file))->tensors();
}

std::vector<float> values_of(const TensorInfo& t) {
  std::vector<float> values(static_cast<size_t>(t.numel()));
  convert_to_f32(t.dtype, t.data, values.data(), values.size());
  return values;
}

// 2^ceil(log2(max(amax, floor) / format_max)) as an e8m0 byte, in double precision: an independent reading of
// kernel.py's fast_round_scale.
uint8_t expected_exponent(float amax, float floor, double format_max) {
  return static_cast<uint8_t>(std::ceil(std::log2(std::max(amax, floor) / format_max)) + 127);
}

// The nearest e2m1 code (|x| <= 6), ties to the even code, by trying all eight magnitudes.
uint8_t nearest_e2m1(float x) {
  uint8_t best = 0;
  for (uint8_t code = 1; code < 8; ++code) {
    const float here = std::abs(std::abs(x) - f4_e2m1_to_f32(code));
    const float there = std::abs(std::abs(x) - f4_e2m1_to_f32(best));
    if (here < there || (here == there && code % 2 == 0)) best = code;
  }
  return static_cast<uint8_t>(best | (std::signbit(x) ? 0x8 : 0));
}

TEST(DeepseekV4ReleasedTest, ConversionWritesTheReleasedNamesDtypesAndConfig) {
  const Converted& converted = fp4_conversion();
  const auto source = tensors_of(fixture() / "model.safetensors");
  const auto released = tensors_of(converted.released / "model.safetensors");
  const auto expect_tensor = [&](const std::string& name, DType dtype, std::vector<int64_t> shape) {
    const auto it = released.find(name);
    ASSERT_NE(it, released.end()) << name;
    EXPECT_EQ(it->second.dtype, dtype) << name;
    EXPECT_EQ(it->second.shape, shape) << name;
  };
  expect_tensor("embed.weight", DType::BF16, {512, 64});
  expect_tensor("head.weight", DType::BF16, {512, 64});
  expect_tensor("norm.weight", DType::BF16, {64});
  expect_tensor("hc_head_fn", DType::F32, {4, 256});
  expect_tensor("layers.0.hc_attn_fn", DType::F32, {24, 256});
  expect_tensor("layers.0.attn_norm.weight", DType::BF16, {64});
  expect_tensor("layers.0.attn.kv_norm.weight", DType::BF16, {32});
  expect_tensor("layers.0.attn.attn_sink", DType::F32, {4});
  expect_tensor("layers.0.attn.wq_a.weight", DType::F8_E4M3, {32, 64});
  expect_tensor("layers.0.attn.wq_a.scale", DType::F8_E8M0, {1, 1});
  expect_tensor("layers.0.attn.wo_a.weight", DType::F8_E4M3, {32, 64});
  expect_tensor("layers.0.attn.compressor.wkv.weight", DType::BF16, {32, 64});
  expect_tensor("layers.0.attn.compressor.ape", DType::F32, {8, 32});
  expect_tensor("layers.0.ffn.gate.tid2eid", DType::I32, {512, 2});
  expect_tensor("layers.0.ffn.gate.weight", DType::BF16, {8, 64});
  expect_tensor("layers.0.ffn.experts.7.w2.weight", DType::I8, {64, 16});
  expect_tensor("layers.0.ffn.experts.7.w2.scale", DType::F8_E8M0, {64, 1});
  expect_tensor("layers.0.ffn.shared_experts.w1.weight", DType::F8_E4M3, {32, 64});
  expect_tensor("layers.1.ffn.gate.bias", DType::F32, {8});
  expect_tensor("layers.1.attn.indexer.wq_b.weight", DType::F8_E4M3, {32, 32});
  expect_tensor("layers.1.attn.indexer.weights_proj.weight", DType::BF16, {2, 64});
  // Every source tensor under one released name, plus a scale for each quantized weight: per layer the five
  // attention projections, three shared-expert and 8 x 3 expert matrices, and the indexer's wq_b of the CSA layers.
  for (const auto& [name, tensor] : released) EXPECT_FALSE(name.starts_with("model.")) << name;
  EXPECT_EQ(released.size(), source.size() + 4 * (5 + 3 + 24) + 2);

  const nlohmann::json config = read_json(converted.released / "config.json");
  EXPECT_EQ(config["expert_dtype"], "fp4");
  EXPECT_EQ(config["quantization_config"]["quant_method"], "fp8");
  EXPECT_EQ(config["quantization_config"]["scale_fmt"], "ue8m0");
  EXPECT_EQ(config["quantization_config"]["weight_block_size"], nlohmann::json({128, 128}));
  // The fixture's HCA / CSA / HCA / CSA layers (rates 8 and 4), then the MTP layer; one hash-routed layer.
  EXPECT_EQ(config["compress_ratios"], nlohmann::json({8, 4, 8, 4, 0}));
  EXPECT_EQ(config["num_hash_layers"], 1);
  EXPECT_EQ(config["qk_rope_head_dim"], 8);
  EXPECT_EQ(config["compress_rope_theta"], 160000.0);
  EXPECT_FALSE(config.contains("layer_types") || config.contains("rope_parameters") || config.contains("dtype"));
  EXPECT_EQ(read_json(converted.twin / "config.json"), read_json(fixture() / "config.json"));
}

// The FP8 blocks and FP4 groups against DeepSeek's scheme recomputed from the fixture's bf16 values: the scale
// 2^ceil(log2(amax / max)) and each code the nearest (e4m3 by fp8_twin.h's search of the code table).
TEST(DeepseekV4ReleasedTest, CodesAndScalesFollowDeepseeksScheme) {
  const auto source = tensors_of(fixture() / "model.safetensors");
  const auto released = tensors_of(fp4_conversion().released / "model.safetensors");

  const std::vector<float> wq_b = values_of(source.at("model.layers.1.attn.wq_b.weight"));  // [128, 32]: one block
  float amax = 0;
  for (float x : wq_b) amax = std::max(amax, std::abs(x));
  const TensorInfo& scale = released.at("layers.1.attn.wq_b.scale");
  const auto exponent = static_cast<uint8_t>(*scale.data);
  EXPECT_EQ(exponent, expected_exponent(amax, 1e-4f, 448.0));
  const auto* codes = reinterpret_cast<const uint8_t*>(released.at("layers.1.attn.wq_b.weight").data);
  for (size_t i = 0; i < wq_b.size(); ++i) {
    ASSERT_EQ(codes[i], testing::to_e4m3(wq_b[i] / std::ldexp(1.0f, exponent - 127))) << i;
  }

  const std::vector<float> w1 = values_of(source.at("model.layers.2.ffn.experts.5.w1.weight"));  // [32, 64]
  const auto* exponents = reinterpret_cast<const uint8_t*>(released.at("layers.2.ffn.experts.5.w1.scale").data);
  const auto* packed = reinterpret_cast<const uint8_t*>(released.at("layers.2.ffn.experts.5.w1.weight").data);
  for (size_t group = 0; group < w1.size() / 32; ++group) {
    float group_amax = 0;
    for (size_t j = 0; j < 32; ++j) group_amax = std::max(group_amax, std::abs(w1[group * 32 + j]));
    ASSERT_EQ(exponents[group], expected_exponent(group_amax, std::ldexp(6.0f, -126), 6.0)) << group;
    const float group_scale = std::ldexp(1.0f, exponents[group] - 127);
    for (size_t j = 0; j < 32; ++j) {
      const size_t i = group * 32 + j;
      const uint8_t code = i % 2 == 0 ? packed[i / 2] & 0xf : packed[i / 2] >> 4;  // element 2j in the low nibble
      ASSERT_EQ(code, nearest_e2m1(w1[i] / group_scale)) << i;
    }
  }
}

TEST(DeepseekV4ReleasedTest, LogitsEqualTheDequantizedTwin) {
  const Converted& converted = fp4_conversion();
  const auto released = golden_logits(converted.released);
  const float twin_error = relative_error(released, golden_logits(converted.twin));
  const float quantization_error = relative_error(released, golden_logits(fixture()));
  std::cout << "deepseek_v4, FP8 + FP4 experts: released vs dequantized twin " << twin_error << ", vs bf16 original "
            << quantization_error << " (relative, max |diff| / max |logit|)\n";
  RecordProperty("relative_error_vs_bf16", std::to_string(quantization_error));
  EXPECT_LE(twin_error, 1e-3f);
  EXPECT_GT(quantization_error, 0.0f) << "the released weights should differ from the bf16 ones";
}

// V4-Flash-Base's layout: the routed experts in the same 128x128 FP8 blocks, every scale float32.
TEST(DeepseekV4ReleasedTest, Fp8ExpertsLogitsEqualTheDequantizedTwin) {
  const Converted converted = convert("fp8", V4ExpertDtype::fp8);
  const auto released = tensors_of(converted.released / "model.safetensors");
  EXPECT_EQ(released.at("layers.3.ffn.experts.0.w2.weight").dtype, DType::F8_E4M3);
  EXPECT_EQ(released.at("layers.3.ffn.experts.0.w2.scale").dtype, DType::F32);
  EXPECT_EQ(released.at("layers.3.attn.wo_b.scale").dtype, DType::F32);
  EXPECT_EQ(read_json(converted.released / "config.json")["expert_dtype"], "fp8");
  EXPECT_LE(relative_error(golden_logits(converted.released), golden_logits(converted.twin)), 1e-3f);
}

// The MTP layer's tensors (mtp.0.*, as the released files hold them: FP8 projections, FP4 experts, float32 mHC)
// load without error and leave the logits as they are; speculative decoding reads them later.
TEST(DeepseekV4ReleasedTest, MtpTensorsInTheFileAreKept) {
  const fs::path source = fp4_conversion().released;
  auto tensors = tensors_of(source / "model.safetensors");
  std::deque<std::vector<std::byte>> buffers;
  const auto add = [&](const std::string& name, DType dtype, std::vector<int64_t> shape, uint8_t fill) {
    int64_t count = 1;
    for (int64_t d : shape) count *= d;
    auto& bytes = buffers.emplace_back(static_cast<size_t>(count) * dtype_size(dtype), std::byte{fill});
    tensors[name] = {name, {}, dtype, std::move(shape), bytes.data(), bytes.size(), {}};
  };
  add("mtp.0.e_proj.weight", DType::F8_E4M3, {64, 64}, 0x38);
  add("mtp.0.e_proj.scale", DType::F8_E8M0, {1, 1}, 127);
  add("mtp.0.enorm.weight", DType::BF16, {64}, 0x3f);
  add("mtp.0.hc_head_fn", DType::F32, {4, 256}, 0);
  add("mtp.0.attn.wq_a.weight", DType::F8_E4M3, {32, 64}, 0x38);
  add("mtp.0.attn.wq_a.scale", DType::F8_E8M0, {1, 1}, 120);
  add("mtp.0.ffn.experts.0.w1.weight", DType::I8, {32, 32}, 0x22);
  add("mtp.0.ffn.experts.0.w1.scale", DType::F8_E8M0, {32, 2}, 127);
  std::vector<TensorInfo> all;
  for (const auto& [name, tensor] : tensors) all.push_back(tensor);
  const fs::path dir = temp_dir("mtp");
  testing::write_model(dir, source, all, read_json(source / "config.json"));
  EXPECT_EQ(golden_logits(dir), golden_logits(source));
}

// A source in several shards (model.safetensors.index.json), which convert on threads of their own: each released
// shard holds the released tensors of its source shard, the index names the shard of every tensor, and the logits
// are the one-shard conversion's.
TEST(DeepseekV4ReleasedTest, ShardedSourceConvertsShardByShard) {
  const fs::path base = temp_dir("sharded");
  fs::remove_all(base);
  const fs::path source = base / "source";
  fs::create_directories(source);
  std::vector<std::vector<TensorInfo>> shards(3);
  nlohmann::json weight_map = nlohmann::json::object();
  size_t next = 0;
  for (const auto& [name, tensor] : tensors_of(fixture() / "model.safetensors")) {
    const size_t shard = next++ % shards.size();
    shards[shard].push_back(tensor);
    weight_map[name] = "model-0000" + std::to_string(shard + 1) + "-of-00003.safetensors";
  }
  for (size_t i = 0; i < shards.size(); ++i) {
    write_safetensors(source / ("model-0000" + std::to_string(i + 1) + "-of-00003.safetensors"), shards[i]);
  }
  std::ofstream(source / "model.safetensors.index.json") << nlohmann::json{{"weight_map", weight_map}}.dump();
  for (const auto& entry : fs::directory_iterator(fixture())) {
    const std::string name = entry.path().filename().string();
    if (name != "model.safetensors") fs::copy_file(entry.path(), source / name);
  }
  V4ReleasedConversion conversion;
  write_v4_released_checkpoint(source, base / "released", conversion);

  const nlohmann::json index = read_json(base / "released" / "model.safetensors.index.json");
  size_t num_released = 0;
  for (size_t i = 0; i < shards.size(); ++i) {
    const std::string shard = "model-0000" + std::to_string(i + 1) + "-of-00003.safetensors";
    for (const auto& [name, tensor] : tensors_of(base / "released" / shard)) {
      EXPECT_EQ(index["weight_map"].value(name, ""), shard) << name;
      ++num_released;
    }
  }
  EXPECT_EQ(index["weight_map"].size(), num_released);
  EXPECT_EQ(tensors_of(fp4_conversion().released / "model.safetensors").size(), num_released);
  EXPECT_EQ(golden_logits(base / "released"), golden_logits(fp4_conversion().released));
}

// Under --quantization fp8 the released checkpoint loads as it is but for its FP4 experts, which reach the backend
// as block FP8 of the same values (BlockFp8Weight's repacking is exact for these scales): the same logits.
TEST(DeepseekV4ReleasedTest, OnlineFp8RepacksTheFp4ExpertsExactly) {
  const fs::path released = fp4_conversion().released;
  EXPECT_EQ(golden_logits(released, OnlineQuantization::fp8), golden_logits(released));
  auto backend = make_cpu_backend(1);
  const auto expert_dtype = [&](OnlineQuantization quantization, const std::string& name) {
    const Checkpoint checkpoint = Checkpoint::open(released, nullptr, quantization);
    return WeightLoader(checkpoint, *backend).linear_weights().info(name, {64, 32}).dtype;
  };
  EXPECT_EQ(expert_dtype(OnlineQuantization::none, "layers.0.ffn.experts.7.w2.weight"), DType::F4_E2M1);
  EXPECT_EQ(expert_dtype(OnlineQuantization::fp8, "layers.0.ffn.experts.7.w2.weight"), DType::F8_E4M3);
}

TEST(DeepseekV4ReleasedTest, ConvertCommand) {
  const fs::path base = temp_dir("cli");
  fs::remove_all(base);
  const auto run = [&](const std::string& out) {
    return testing::run_command({testing::tern_binary().string(), "convert-deepseek-v4", "--model",
                                 fixture().string(), "--out", (base / out).string(), "--expert-dtype", "fp4",
                                 "--dequantized-twin", (base / (out + "_twin")).string()});
  };
  const auto result = run("released");
  ASSERT_EQ(result.exit_code, 0) << result.output;
  // The library's conversion, byte for byte.
  const auto bytes = [](const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  EXPECT_EQ(bytes(base / "released" / "model.safetensors"), bytes(fp4_conversion().released / "model.safetensors"));
  EXPECT_EQ(bytes(base / "released_twin" / "model.safetensors"), bytes(fp4_conversion().twin / "model.safetensors"));
  EXPECT_NE(run("released").exit_code, 0) << "a directory that is not empty is left alone";
}

// ---- Malformed released checkpoints: each fails at load, naming what is wrong and where. ----

class DeepseekV4ReleasedLoadErrorTest : public ::testing::Test {
 protected:
  // The fp4 conversion with its tensors changed by `edit` and its config by `edit_config`.
  std::string error_of(const std::string& tag, const std::function<void(std::map<std::string, TensorInfo>&)>& edit,
                       const std::function<void(nlohmann::json&)>& edit_config = [](nlohmann::json&) {}) {
    const fs::path source = fp4_conversion().released;
    auto tensors = tensors_of(source / "model.safetensors");
    edit(tensors);
    nlohmann::json config = read_json(source / "config.json");
    edit_config(config);
    std::vector<TensorInfo> all;
    for (const auto& [name, tensor] : tensors) all.push_back(tensor);
    const fs::path dir = temp_dir("broken_" + tag);
    testing::write_model(dir, source, all, config);
    return load_error(dir);
  }
  // Gives tensor `name` the shape `shape`, with bytes to match.
  void reshape(std::map<std::string, TensorInfo>& tensors, const std::string& name, std::vector<int64_t> shape) {
    TensorInfo& t = tensors.at(name);
    t.shape = std::move(shape);
    const size_t size = static_cast<size_t>(t.numel()) * dtype_size(t.dtype);
    t.data = buffers_.emplace_back(size, std::byte{0x7f}).data();
    t.size_bytes = size;
  }

  std::deque<std::vector<std::byte>> buffers_;
};

const std::string kWqA = "layers.0.attn.wq_a";
const std::string kExpert = "layers.0.ffn.experts.0.w1";

TEST_F(DeepseekV4ReleasedLoadErrorTest, Fp8WeightWithoutScale) {
  const std::string error = error_of("fp8_no_scale", [](auto& tensors) { tensors.erase(kWqA + ".scale"); });
  EXPECT_NE(error.find("model.safetensors: FP8 weight '" + kWqA + ".weight' has no scale tensor '" + kWqA +
                       ".weight_scale_inv' (nor '" + kWqA + ".scale', DeepSeek-V4's released naming)"),
            std::string::npos) << error;
}

TEST_F(DeepseekV4ReleasedLoadErrorTest, MisshapenFp8Scale) {
  const std::string error =
      error_of("fp8_scale_shape", [&](auto& tensors) { reshape(tensors, kWqA + ".scale", {2, 1}); });
  EXPECT_NE(error.find("model.safetensors: scale tensor '" + kWqA + ".scale' has shape [2, 1], expected [1, 1]"),
            std::string::npos) << error;
}

TEST_F(DeepseekV4ReleasedLoadErrorTest, E8m0ScalesWithoutUe8m0ScaleFmt) {
  const std::string error = error_of("no_scale_fmt", [](auto&) {},
                                     [](nlohmann::json& config) { config["quantization_config"].erase("scale_fmt"); });
  EXPECT_NE(error.find("model.safetensors: scale tensor '"), std::string::npos) << error;
  EXPECT_NE(error.find("is F8_E8M0; block scales are F32, BF16 or F16 (F8_E8M0 with scale_fmt ue8m0)"),
            std::string::npos) << error;
}

TEST_F(DeepseekV4ReleasedLoadErrorTest, ExpertWithoutScale) {
  const std::string error = error_of("expert_no_scale", [](auto& tensors) { tensors.erase(kExpert + ".scale"); });
  EXPECT_NE(error.find("model.safetensors: FP4 expert weight '" + kExpert + ".weight' has no scale tensor '" +
                       kExpert + ".scale'"), std::string::npos) << error;
}

TEST_F(DeepseekV4ReleasedLoadErrorTest, MisshapenExpertScale) {
  const std::string error =
      error_of("expert_scale_shape", [&](auto& tensors) { reshape(tensors, kExpert + ".scale", {32, 1}); });
  EXPECT_NE(error.find("model.safetensors: scale tensor '" + kExpert + ".scale' has shape [32, 1], expected [32, 2] "
                       "for the FP4 expert weight '" + kExpert + ".weight' of [32, 64] values"),
            std::string::npos) << error;
}

TEST_F(DeepseekV4ReleasedLoadErrorTest, ExpertScaleOfAnotherDtype) {
  const std::string error = error_of("expert_scale_dtype", [](auto& tensors) {
    TensorInfo& scale = tensors.at(kExpert + ".scale");
    scale.dtype = DType::U8;
  });
  EXPECT_NE(error.find("model.safetensors: scale tensor '" + kExpert + ".scale' is U8; FP4 expert scales are "
                       "F8_E8M0"), std::string::npos) << error;
}

TEST_F(DeepseekV4ReleasedLoadErrorTest, MisshapenExpertWeight) {
  const std::string error =
      error_of("expert_shape", [&](auto& tensors) { reshape(tensors, kExpert + ".weight", {32, 31}); });
  EXPECT_NE(error.find("model.safetensors: FP4 expert tensor '" + kExpert + ".weight' is I8 [32, 31]; expected "
                       "`X.weight` I8 [out, in / 2]"), std::string::npos) << error;
}

// Weight and scale agree with each other but not with the model: half of w1's inputs.
TEST_F(DeepseekV4ReleasedLoadErrorTest, ExpertOfAnotherSizeThanTheModel) {
  const std::string error = error_of("expert_model_shape", [&](auto& tensors) {
    reshape(tensors, kExpert + ".weight", {32, 16});
    reshape(tensors, kExpert + ".scale", {32, 1});
  });
  EXPECT_NE(error.find("model.safetensors: tensor '" + kExpert + ".weight' has shape [32, 32], expected [32, 64]"),
            std::string::npos) << error;
}

TEST_F(DeepseekV4ReleasedLoadErrorTest, PackedExpertsWithoutExpertDtypeFp4) {
  const std::string error =
      error_of("no_expert_dtype", [](auto&) {}, [](nlohmann::json& config) { config.erase("expert_dtype"); });
  EXPECT_NE(error.find("model.safetensors: tensor 'layers."), std::string::npos) << error;
  EXPECT_NE(error.find("is I8 (DeepSeek-V4's packed FP4 experts) but "), std::string::npos) << error;
  EXPECT_NE(error.find("config.json has no expert_dtype \"fp4\""), std::string::npos) << error;
}

TEST_F(DeepseekV4ReleasedLoadErrorTest, UnknownExpertDtype) {
  const std::string error =
      error_of("expert_dtype", [](auto&) {}, [](nlohmann::json& config) { config["expert_dtype"] = "fp6"; });
  EXPECT_NE(error.find("config.json: expert_dtype \"fp6\" is not supported (supported: \"fp4\", \"fp8\")"),
            std::string::npos) << error;
}

TEST_F(DeepseekV4ReleasedLoadErrorTest, UnknownScaleFmt) {
  const std::string error = error_of("scale_fmt", [](auto&) {}, [](nlohmann::json& config) {
    config["quantization_config"]["scale_fmt"] = "ue4m3";
  });
  EXPECT_NE(error.find("config.json: quantization_config.scale_fmt 'ue4m3' is not supported"), std::string::npos)
      << error;
}

}  // namespace
}  // namespace tern
