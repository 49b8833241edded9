// The CLI contract against transformers: `tern logits` within kSharedGoldenTolerance of golden_logits and
// `tern generate --max-tokens 24` equal to golden.json's greedy tokens, for every dense fixture model.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "fixtures.h"
#include "model/safetensors.h"
#include "run_command.h"

namespace tern {
namespace {

using testing::fixtures_dir;
using testing::read_json;
using testing::run_command;

std::string join_ids(const nlohmann::json& ids) {
  std::string s;
  for (const auto& id : ids) s += (s.empty() ? "" : ",") + std::to_string(id.get<int>());
  return s;
}

std::vector<float> read_f32(const TensorInfo& info) {
  std::vector<float> out(info.numel());
  convert_to_f32(info.dtype, info.data, out.data(), out.size());
  return out;
}

class GoldenTest : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenTest, LogitsMatchTransformers) {
  const auto dir = fixtures_dir() / "models" / GetParam();
  const auto golden = read_json(dir / "golden.json");
  const auto reference = SafetensorsFile::open(dir / "golden_logits.safetensors");
  for (size_t p = 0; p < golden["prompts"].size(); ++p) {
    const auto out = std::filesystem::path(::testing::TempDir()) / (GetParam() + std::to_string(p) + ".safetensors");
    const auto result = run_command({testing::tern_binary().string(), "logits", "--model", dir.string(),
                                     "--prompt-ids", join_ids(golden["prompts"][p]), "--out", out.string()});
    ASSERT_EQ(result.exit_code, 0) << result.output;
    const auto ours_file = SafetensorsFile::open(out);
    const TensorInfo* ours = ours_file->find("logits");
    const TensorInfo* ref = reference->find("logits_" + std::to_string(p));
    ASSERT_NE(ours, nullptr);
    ASSERT_NE(ref, nullptr);
    ASSERT_EQ(ours->shape, ref->shape);
    const auto a = read_f32(*ours);
    const auto b = read_f32(*ref);
    float max_diff = 0, max_ref = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      max_diff = std::max(max_diff, std::abs(a[i] - b[i]));
      max_ref = std::max(max_ref, std::abs(b[i]));
    }
    EXPECT_LE(max_diff / max_ref, testing::kSharedGoldenTolerance) << GetParam() << " prompt " << p;
  }
}

TEST_P(GoldenTest, GreedyTokensMatchTransformers) {
  const auto dir = fixtures_dir() / "models" / GetParam();
  const auto golden = read_json(dir / "golden.json");
  for (size_t p = 0; p < golden["prompts"].size(); ++p) {
    const auto result = run_command({testing::tern_binary().string(), "generate", "--model", dir.string(),
                                     "--prompt-ids", join_ids(golden["prompts"][p]), "--max-tokens", "24"});
    ASSERT_EQ(result.exit_code, 0) << result.output;
    EXPECT_EQ(nlohmann::json::parse(result.output), golden["greedy_24"][p]) << GetParam() << " prompt " << p;
  }
}

INSTANTIATE_TEST_SUITE_P(Dense, GoldenTest, ::testing::Values("llama", "llama3_rope", "qwen2", "qwen3"));
INSTANTIATE_TEST_SUITE_P(Moe, GoldenTest,
                         ::testing::Values("mixtral", "qwen3_moe", "gpt_oss", "deepseek_v3", "deepseek_v4"));

}  // namespace
}  // namespace tern

namespace tern {
namespace {

// A small real model (trained on Python source): greedy continuation equals transformers' over 32 tokens.
TEST(RealModelGoldenTest, TernPy13mGreedyMatchesTransformers) {
  const auto dir = testing::fixtures_dir() / "models" / "tern-py-13m";
  const auto golden = testing::read_json(dir / "golden.json");
  for (size_t p = 0; p < golden["prompts"].size(); ++p) {
    const auto result = testing::run_command({testing::tern_binary().string(), "generate", "--model", dir.string(),
                                              "--prompt-ids", join_ids(golden["prompts"][p]), "--max-tokens", "32"});
    ASSERT_EQ(result.exit_code, 0) << result.output;
    EXPECT_EQ(nlohmann::json::parse(result.output), golden["greedy_32"][p]) << "prompt " << p;
  }
}

}  // namespace
}  // namespace tern
