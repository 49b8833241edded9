// The dense (and below, MoE) fixture models through the CUDA backend: logits within 2e-2 (max |diff| / max |ref|) of transformers'
// float64 golden_logits, and greedy tokens equal to the CPU backend's over 24 steps on at least 2 of 3 prompts
// (bf16 rounding may flip a near-tie).
#include <algorithm>
#include <fstream>

#include "cuda_test_util.h"
#include "fixtures.h"
#include "golden_logits.h"
#include "model/model.h"
#include "model/sequence_runner.h"
#include "v4_without_choices.h"

namespace tern {
namespace {

using testing::fixtures_dir;
using testing::read_json;
using testing::relative_error;

std::vector<int32_t> ids(const nlohmann::json& prompt) { return prompt.get<std::vector<int32_t>>(); }

class CudaModelTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
    dir = fixtures_dir() / "models" / GetParam();
    if (!std::filesystem::exists(dir / "model.safetensors")) GTEST_SKIP() << "fixture missing: " << dir;
  }

  // Per golden prompt: the relative error of the prompt's logits (every position) against golden_logits.
  std::vector<double> golden_logit_errors() {
    auto backend = make_cuda_backend(0);
    auto model = load_model(dir, *backend);
    const std::vector<double> errors = testing::prompt_logit_errors(*model, *backend, dir);
    for (size_t p = 0; p < errors.size(); ++p) {
      std::printf("%s prompt %zu: relative logit error %.2e\n", GetParam().c_str(), p, errors[p]);
    }
    return errors;
  }

  // Both backends decode the CPU backend's greedy continuation (teacher forcing), so that a near-tie broken the
  // other way does not send them down different texts: every step's logits must be within `tolerance` of the CPU's, and
  // the CUDA backend's choice must be the CPU's or a token the CPU scores within that tolerance of its best.
  // With an FP8 KV cache (kv_dtype), on both backends.
  void expect_teacher_forced_decode_matches_cpu(const std::filesystem::path& model_dir, double tolerance = 2e-2,
                                                KvCacheDtype kv_dtype = KvCacheDtype::automatic) {
    auto gpu = make_cuda_backend(0);
    auto cpu = make_cpu_backend(2);
    auto gpu_model = load_model(model_dir, *gpu);
    auto cpu_model = load_model(model_dir, *cpu);
    const auto golden = read_json(dir / "golden.json");
    const auto argmax = [](const std::vector<float>& v) {
      return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
    };
    for (const auto& prompt_json : golden["prompts"]) {
      const auto prompt = ids(prompt_json);
      const int64_t steps = 24;
      SequenceRunner gpu_runner(*gpu_model, *gpu, static_cast<int64_t>(prompt.size()) + steps, 16, kv_dtype);
      SequenceRunner cpu_runner(*cpu_model, *cpu, static_cast<int64_t>(prompt.size()) + steps, 16, kv_dtype);
      const auto prompt_ours = gpu->to_host_f32(gpu_runner.append(prompt, true));
      const auto prompt_reference = cpu->to_host_f32(cpu_runner.append(prompt, true));
      EXPECT_LE(relative_error(prompt_ours, prompt_reference), tolerance)
          << GetParam() << ", " << prompt.size() << " tokens";
      const size_t vocab = prompt_ours.size() / prompt.size();
      std::vector<float> ours(prompt_ours.end() - static_cast<std::ptrdiff_t>(vocab), prompt_ours.end());
      std::vector<float> reference(prompt_reference.end() - static_cast<std::ptrdiff_t>(vocab), prompt_reference.end());
      int other_choices = 0;
      for (int64_t step = 0; step < steps; ++step) {
        const int32_t best = argmax(reference);
        const int32_t chosen = argmax(ours);
        if (chosen != best) {
          ++other_choices;
          const float scale = std::max(std::abs(*std::max_element(reference.begin(), reference.end())),
                                       std::abs(*std::min_element(reference.begin(), reference.end())));
          EXPECT_LE(reference[best] - reference[chosen], tolerance * scale)
              << GetParam() << ", step " << step << ": token " << chosen << " instead of " << best;
        }
        const std::vector<int32_t> next = {best};
        ours = gpu->to_host_f32(gpu_runner.append(next, false));
        reference = cpu->to_host_f32(cpu_runner.append(next, false));
        EXPECT_LE(relative_error(ours, reference), tolerance) << GetParam() << ", after step " << step;
      }
      std::printf("%s prompt of %zu tokens: %d of %lld steps chose a near-tied token\n", GetParam().c_str(),
                  prompt.size(), other_choices, static_cast<long long>(steps));
    }
  }

  std::filesystem::path dir;
};

TEST_P(CudaModelTest, LogitsMatchTransformers) {
  const auto errors = golden_logit_errors();
  for (size_t p = 0; p < errors.size(); ++p) EXPECT_LE(errors[p], 2e-2) << GetParam() << " prompt " << p;
}

TEST_P(CudaModelTest, GreedyTokensMatchCpuBackend) {
  auto gpu = make_cuda_backend(0);
  auto cpu = make_cpu_backend(2);
  auto gpu_model = load_model(dir, *gpu);
  auto cpu_model = load_model(dir, *cpu);
  const auto golden = read_json(dir / "golden.json");
  int equal = 0;
  for (const auto& prompt_json : golden["prompts"]) {
    const auto prompt = ids(prompt_json);
    const auto ours = greedy_generate(*gpu_model, *gpu, prompt, 24);
    const auto reference = greedy_generate(*cpu_model, *cpu, prompt, 24);
    ASSERT_EQ(ours.size(), 24u);
    equal += ours == reference;
  }
  EXPECT_GE(equal, 2) << GetParam() << ": greedy tokens equal on " << equal << " of " << golden["prompts"].size();
}

// --kv-cache-dtype fp8_e4m3 on both backends, step by step (head_dim 16 and 32: the CUDA-core kernels, prefill
// included). The CUDA backend caches codes of bf16-rounded keys and values, the CPU of float32 ones: a value within
// bf16's rounding (2^-9) of the midpoint between two e4m3 codes (2^-4 apart) takes the other code, one in about 30,
// so the bound is three times the bf16 one (measured on an H100: 2.2e-2 to 4.7e-2).
TEST_P(CudaModelTest, Fp8KvCacheTeacherForcedDecodeMatchesCpuBackend) {
  expect_teacher_forced_decode_matches_cpu(dir, 6e-2, KvCacheDtype::fp8_e4m3);
}

INSTANTIATE_TEST_SUITE_P(Dense, CudaModelTest, ::testing::Values("llama", "llama3_rope", "qwen2", "qwen3"));

// MoE fixtures: gpt_oss also
// alternates sliding-window and full layers (two KV cache groups) and has attention sinks. A top-k router is a discrete choice:
// bf16 activations shift router logits enough to swap a near-tied expert now and then, and a swap in the first
// layer reaches every later position through attention (transformers' own bf16 forward does it on mixtral's
// 40-token prompt: 2.5e-1, 20 positions past 2e-2). So the goldens are checked on 2 of 3 prompts, and the whole
// MoE path against the CPU backend on the same checkpoint with every expert routed (top_k = experts: the choice
// is gone, the weights stay). deepseek_v3 runs MLA (a keys-only latent cache, absorbed per-head projections,
// interleaved rope) and DeepSeek's group-limited router with a selection bias.
class CudaMoeModelTest : public CudaModelTest {};

TEST_P(CudaMoeModelTest, LogitsMatchTransformersOnTwoOfThreePrompts) {
  const auto errors = golden_logit_errors();
  EXPECT_GE(std::count_if(errors.begin(), errors.end(), [](double e) { return e <= 2e-2; }), 2) << GetParam();
}

// The whole MoE path against the CPU backend with every expert routed.
TEST_P(CudaMoeModelTest, EveryExpertRoutedMatchesCpuBackend) {
  const auto every = testing::every_expert_routed(dir, GetParam());
  expect_teacher_forced_decode_matches_cpu(every);
  std::filesystem::remove_all(every);
}

INSTANTIATE_TEST_SUITE_P(Moe, CudaMoeModelTest, ::testing::Values("qwen3_moe", "mixtral", "gpt_oss", "deepseek_v3"));

// Keys-only caches in FP8 on both backends (MLA's latent, DeepSeek-V4's K = V): each cached dim is a key and a value
// at once, so a code the two backends take apart (the bf16-rounded value against the float32 one, as above) moves an
// attention output by one e4m3 step, up to 1/8 of it; where attention returns little more than one key (a 1-token
// prompt), that reaches the logits. On an H100: deepseek_v3 6.2e-2, deepseek_v4 1.07e-1. Same codes on both
// backends, the kernels agree within 2e-2 (CudaMlaAttentionTest, CudaV4LayerTest).
constexpr double kKeysOnlyFp8Tolerance = 0.13;

class CudaMlaModelTest : public CudaModelTest {};

TEST_P(CudaMlaModelTest, Fp8KvCacheEveryExpertRoutedMatchesCpuBackend) {
  const auto every = testing::every_expert_routed(dir, GetParam() + "_fp8_kv");
  expect_teacher_forced_decode_matches_cpu(every, kKeysOnlyFp8Tolerance, KvCacheDtype::fp8_e4m3);
  std::filesystem::remove_all(every);
}

INSTANTIATE_TEST_SUITE_P(Mla, CudaMlaModelTest, ::testing::Values("deepseek_v3"));

// The checkpoint as it is makes choices that rounding decides. transformers' own forward on the H200 (5.17, float32
// weights under bf16 autocast) misses the goldens (float32, made on a CPU) of the 7- and 40-token prompts by 0.739
// and 0.354, where a near-tied choice went the other way, and meets the 1-token prompt's at 9.8e-3
// (docs/BENCHMARKS.md). The CUDA backend's bf16 may miss them by no more than twice as much.
class CudaV4ModelTest : public CudaModelTest {};

TEST_P(CudaV4ModelTest, LogitsWithinTwiceTransformersBf16Error) {
  const auto errors = golden_logit_errors();
  ASSERT_EQ(errors.size(), 3u);
  const double transformers_bf16[] = {9.8e-3, 0.739, 0.354};
  for (size_t i = 0; i < errors.size(); ++i) {
    EXPECT_LE(errors[i], 2 * transformers_bf16[i]) << GetParam() << " prompt " << i;
  }
}

// Without choices, what is left is rounding: transformers' bf16 forward of the same variant departs from its float32
// one by up to 2.45e-2 on the prompts alone (docs/BENCHMARKS.md); twice that, as for every bf16 kernel.
TEST_P(CudaV4ModelTest, WithoutChoicesTeacherForcedDecodeMatchesCpuBackend) {
  const auto without_choices = testing::v4_without_choices(dir);
  expect_teacher_forced_decode_matches_cpu(without_choices, 4.9e-2);
  std::filesystem::remove_all(without_choices);
}

// The window's keys in FP8 on both backends (the compressed entries stay float32), within the keys-only bound above.
TEST_P(CudaV4ModelTest, Fp8KvCacheWithoutChoicesTeacherForcedDecodeMatchesCpuBackend) {
  const auto without_choices = testing::v4_without_choices(dir);
  expect_teacher_forced_decode_matches_cpu(without_choices, kKeysOnlyFp8Tolerance, KvCacheDtype::fp8_e4m3);
  std::filesystem::remove_all(without_choices);
}

INSTANTIATE_TEST_SUITE_P(DeepseekV4, CudaV4ModelTest, ::testing::Values("deepseek_v4"));

}  // namespace
}  // namespace tern
