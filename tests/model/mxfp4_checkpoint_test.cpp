// MXFP4 checkpoints (gpt-oss's format): a quantized twin of the bf16 gpt_oss fixture, its experts made here as
// `_blocks` and `_scales` in gpt-oss's [E, out, in] layout, gives on the CPU backend the logits of its exactly
// dequantized float32 twin in the bf16 fixture's [E, in, out] layout, and lands near the bf16 original (the relative
// error is printed). Every malformed MXFP4 checkpoint fails at load, naming the file and tensor or config field.
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
#include "golden_logits.h"
#include "model/model.h"
#include "model/safetensors.h"
#include "model/sequence_runner.h"
#include "quantized_checkpoint.h"

namespace tern {
namespace {

namespace fs = std::filesystem;
using testing::fixtures_dir;
using testing::load_error;
using testing::relative_error;
using testing::write_model;
using testing::read_json;

constexpr int64_t kGroup = 32;
const std::string kExperts = "model.layers.0.mlp.experts.";

fs::path gpt_oss() { return fixtures_dir() / "models" / "gpt_oss"; }

// The nearest e2m1 code to x (|x| saturating at 6), ties to the even code.
uint8_t to_e2m1(float x) {
  static const float magnitudes[] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const float a = std::min(std::abs(x), 6.0f);
  int code = 0;
  for (int c = 1; c < 8; ++c) {
    const float here = std::abs(a - magnitudes[c]), best = std::abs(a - magnitudes[code]);
    if (here < best || (here == best && c % 2 == 0)) code = c;
  }
  return static_cast<uint8_t>(code | (std::signbit(x) ? 0x8 : 0));
}

// OCP MX's scale for a group: 2^(floor(log2(amax)) - 2), 2 being e2m1's largest exponent; the e8m0 byte.
uint8_t group_exponent(float amax) {
  if (amax == 0.0f) return 127;
  int exponent = 0;
  std::frexp(amax, &exponent);  // amax = m x 2^exponent, m in [0.5, 1): floor(log2(amax)) = exponent - 1
  return static_cast<uint8_t>(std::clamp(exponent - 1 - 2 + 127, 0, 254));
}

struct Twins {
  fs::path mxfp4;  // `X_blocks` / `X_scales` for the experts, quantization_config in config.json
  fs::path f32;    // the same experts dequantized exactly, as `X` in the bf16 layout; everything else as in bf16
};

// gpt-oss's own config (modules_to_not_convert as in openai/gpt-oss-20b's config.json).
nlohmann::json mxfp4_quantization_config() {
  return {{"quant_method", "mxfp4"},
          {"modules_to_not_convert",
           {"model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"}}};
}

// Quantizes the experts' gate_up_proj [E, H, 2I] and down_proj [E, I, H] of the bf16 fixture in `fixture` to MXFP4
// in gpt-oss's transposed layout ([E, 2I, H / 32, 16] blocks, [E, 2I, H / 32] scales).
class TwinWriter {
 public:
  explicit TwinWriter(const fs::path& fixture)
      : fixture_(fixture), file_(SafetensorsFile::open(fixture_ / "model.safetensors")) {
    for (const auto& [tensor, info] : file_->tensors()) {
      const bool expert = tensor.ends_with("experts.gate_up_proj") || tensor.ends_with("experts.down_proj");
      if (!expert) {
        mxfp4_.push_back(info);
        f32_.push_back(info);
        continue;
      }
      const int64_t experts = info.shape[0], in = info.shape[1], out = info.shape[2], groups = in / kGroup;
      std::vector<float> values(info.numel());
      convert_to_f32(info.dtype, info.data, values.data(), values.size());
      auto& blocks = keep(std::vector<std::byte>(values.size() / 2));
      auto& scales = keep(std::vector<std::byte>(values.size() / kGroup));
      auto& dequantized = keep(std::vector<std::byte>(values.size() * sizeof(float)));
      auto* twin = reinterpret_cast<float*>(dequantized.data());
      for (int64_t e = 0; e < experts; ++e) {
        for (int64_t o = 0; o < out; ++o) {
          for (int64_t g = 0; g < groups; ++g) {
            const auto at = [&](int64_t j) { return (e * in + g * kGroup + j) * out + o; };  // [E, in, out]
            float amax = 0.0f;
            for (int64_t j = 0; j < kGroup; ++j) amax = std::max(amax, std::abs(values[at(j)]));
            const uint8_t exponent = group_exponent(amax);
            const float scale = std::ldexp(1.0f, exponent - 127);
            const int64_t group = (e * out + o) * groups + g;  // [E, out, in / 32]
            scales[group] = static_cast<std::byte>(exponent);
            for (int64_t j = 0; j < kGroup; ++j) {
              const uint8_t code = to_e2m1(values[at(j)] / scale);
              auto& byte = blocks[group * kGroup / 2 + j / 2];
              byte |= static_cast<std::byte>(j % 2 == 0 ? code : code << 4);
              twin[at(j)] = f4_e2m1_to_f32(code) * scale;
            }
          }
        }
      }
      mxfp4_.push_back({tensor + "_blocks", {}, DType::U8, {experts, out, groups, kGroup / 2}, blocks.data(),
                        blocks.size(), {}});
      mxfp4_.push_back({tensor + "_scales", {}, DType::U8, {experts, out, groups}, scales.data(), scales.size(), {}});
      f32_.push_back({tensor, {}, DType::F32, info.shape, dequantized.data(), dequantized.size(), {}});
    }
  }

  const fs::path& fixture() const { return fixture_; }
  std::vector<TensorInfo>& mxfp4_tensors() { return mxfp4_; }

  Twins write(const std::string& tag, const nlohmann::json& quantization = mxfp4_quantization_config()) const {
    const fs::path base = fs::path(::testing::TempDir()) / ("tern_mxfp4_" + tag);
    nlohmann::json config = read_json(fixture_ / "config.json");
    write_model(base / "f32", fixture_, f32_, config);
    config["quantization_config"] = quantization;
    write_model(base / "mxfp4", fixture_, mxfp4_, config);
    return {base / "mxfp4", base / "f32"};
  }

 private:
  std::vector<std::byte>& keep(std::vector<std::byte> bytes) { return buffers_.emplace_back(std::move(bytes)); }

  fs::path fixture_;
  std::shared_ptr<const SafetensorsFile> file_;
  std::deque<std::vector<std::byte>> buffers_;  // what the written tensors point to
  std::vector<TensorInfo> mxfp4_, f32_;
};

std::vector<float> cpu_logits(const fs::path& dir) {
  return testing::cpu_logits(dir, read_json(gpt_oss() / "golden.json")["prompts"].back().get<std::vector<int32_t>>());
}

TEST(Mxfp4TwinTest, LogitsEqualTheDequantizedTwin) {
  const TwinWriter writer(gpt_oss());
  const Twins twins = writer.write("top_k");
  EXPECT_LE(relative_error(cpu_logits(twins.mxfp4), cpu_logits(twins.f32)), 1e-5f);
}

// Every token routed to every expert, so that the comparison with the bf16 weights measures the quantization, not
// an expert choice that a near-tie flips.
TEST(Mxfp4TwinTest, EveryExpertRoutedStaysNearTheBf16Original) {
  const TwinWriter writer(testing::every_expert_routed(gpt_oss(), "mxfp4"));
  const Twins twins = writer.write("every_expert");
  const auto mxfp4 = cpu_logits(twins.mxfp4);
  EXPECT_LE(relative_error(mxfp4, cpu_logits(twins.f32)), 1e-5f);
  const float quantization_error = relative_error(mxfp4, cpu_logits(writer.fixture()));
  std::cout << "gpt_oss: MXFP4 logits vs bf16 original, relative error " << quantization_error << "\n";
  RecordProperty("relative_error_vs_bf16", std::to_string(quantization_error));
  EXPECT_GT(quantization_error, 0.0f) << "the twin should differ from the bf16 weights";
  // e2m1 keeps 1 mantissa bit: this random model lands at 13% (max |diff| over max |logit|), where a weight given
  // another group's scale, another expert's rows or gate and up swapped would be off by the whole logits.
  EXPECT_LE(quantization_error, 0.3f);
}

// transformers' reading of the format (tests/data/README.md): its float64 forward over the experts it dequantized
// from an MXFP4 gpt-oss checkpoint, which the CPU backend (W4A16 in float32) meets to summation order.
TEST(TransformersMxfp4CheckpointTest, CpuMatchesItsFloat64ForwardOverTheDequantizedExperts) {
  testing::expect_cpu_meets_float64_goldens(testing::test_data_dir() / "gpt_oss_mxfp4");
}

// ---- Malformed checkpoints: each fails at load, naming what is wrong and where. ----

class Mxfp4LoadErrorTest : public ::testing::Test {
 protected:
  fs::path broken(const std::string& tag, const std::function<void(std::vector<TensorInfo>&)>& edit,
                  const nlohmann::json& quantization = mxfp4_quantization_config()) {
    edit(writer_.mxfp4_tensors());
    return writer_.write("broken_" + tag, quantization).mxfp4;
  }
  TensorInfo& tensor(std::vector<TensorInfo>& tensors, const std::string& name) {
    const auto it = std::find_if(tensors.begin(), tensors.end(), [&](const TensorInfo& t) { return t.name == name; });
    if (it == tensors.end()) fail("no tensor {}", name);
    return *it;
  }
  void erase(std::vector<TensorInfo>& tensors, const std::string& name) {
    std::erase_if(tensors, [&](const TensorInfo& t) { return t.name == name; });
  }

  TwinWriter writer_{gpt_oss()};
};

TEST_F(Mxfp4LoadErrorTest, BlocksWithoutScales) {
  const auto dir = broken("no_scales", [&](auto& tensors) { erase(tensors, kExperts + "gate_up_proj_scales"); });
  const std::string error = load_error(dir);
  EXPECT_NE(error.find("model.safetensors: MXFP4 blocks tensor '" + kExperts + "gate_up_proj_blocks' has no scale "
                       "tensor '" + kExperts + "gate_up_proj_scales'"), std::string::npos) << error;
}

TEST_F(Mxfp4LoadErrorTest, ScalesWithoutBlocks) {
  const auto dir = broken("no_blocks", [&](auto& tensors) { erase(tensors, kExperts + "down_proj_blocks"); });
  const std::string error = load_error(dir);
  EXPECT_NE(error.find("model.safetensors: MXFP4 scale tensor '" + kExperts + "down_proj_scales' has no blocks "
                       "tensor '" + kExperts + "down_proj_blocks'"), std::string::npos) << error;
}

TEST_F(Mxfp4LoadErrorTest, MisshapenScales) {
  const auto dir = broken("scale_shape", [&](auto& tensors) {
    TensorInfo& scales = tensor(tensors, kExperts + "gate_up_proj_scales");
    scales.shape = {4, 128, 1};
    scales.size_bytes /= 2;
  });
  const std::string error = load_error(dir);
  EXPECT_NE(error.find("model.safetensors: MXFP4 scale tensor '" + kExperts + "gate_up_proj_scales' has shape "
                       "[4, 128, 1], expected [4, 128, 2]"), std::string::npos) << error;
}

TEST_F(Mxfp4LoadErrorTest, MisshapenBlocks) {
  const auto dir = broken("block_shape", [&](auto& tensors) {
    tensor(tensors, kExperts + "down_proj_blocks").shape = {4, 64, 4, 8};
  });
  const std::string error = load_error(dir);
  EXPECT_NE(error.find("model.safetensors: MXFP4 blocks tensor '" + kExperts + "down_proj_blocks' is U8 "
                       "[4, 64, 4, 8]; expected U8 [..., K / 32, 16]"), std::string::npos) << error;
}

// Blocks and scales that agree with each other but not with the model: half of down_proj's input columns.
TEST_F(Mxfp4LoadErrorTest, BlocksOfAnotherSizeThanTheModel) {
  const auto dir = broken("model_shape", [&](auto& tensors) {
    TensorInfo& blocks = tensor(tensors, kExperts + "down_proj_blocks");
    blocks.shape = {4, 64, 1, 16};
    blocks.size_bytes /= 2;
    TensorInfo& scales = tensor(tensors, kExperts + "down_proj_scales");
    scales.shape = {4, 64, 1};
    scales.size_bytes /= 2;
  });
  const std::string error = load_error(dir);
  EXPECT_NE(error.find("model.safetensors: tensor '" + kExperts + "down_proj_blocks' has shape [4, 64, 32], expected "
                       "[4, 64, 64]"), std::string::npos) << error;
}

TEST_F(Mxfp4LoadErrorTest, UnknownQuantMethod) {
  const auto method = nlohmann::json::object({{"quant_method", "mxfp8"}});
  const std::string error = load_error(broken("method", [](auto&) {}, method));
  EXPECT_NE(error.find("config.json: quantization_config.quant_method 'mxfp8' is not supported"), std::string::npos)
      << error;
}

TEST_F(Mxfp4LoadErrorTest, BlocksWithoutQuantizationConfig) {
  const std::string error = load_error(broken("no_config", [](auto&) {}, nullptr));
  EXPECT_NE(error.find("is U8 MXFP4 blocks but"), std::string::npos) << error;
  EXPECT_NE(error.find("has no mxfp4 quantization_config"), std::string::npos) << error;
}

}  // namespace
}  // namespace tern
