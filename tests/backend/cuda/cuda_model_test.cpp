// The dense (and below, MoE) fixture models through the CUDA backend: logits within 2e-2 (max |diff| / max |ref|) of transformers'
// float64 golden_logits, and greedy tokens equal to the CPU backend's over 24 steps on at least 2 of 3 prompts
// (bf16 rounding may flip a near-tie).
#include <algorithm>
#include <fstream>

#include "cuda_test_util.h"
#include "fixtures.h"
#include "model/model.h"
#include "model/safetensors.h"
#include "model/sequence_runner.h"

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
    const auto golden = read_json(dir / "golden.json");
    const auto reference = SafetensorsFile::open(dir / "golden_logits.safetensors");
    std::vector<double> errors;
    for (size_t p = 0; p < golden["prompts"].size(); ++p) {
      const auto prompt = ids(golden["prompts"][p]);
      SequenceRunner runner(*model, *backend, static_cast<int64_t>(prompt.size()));
      const auto logits = backend->to_host_f32(runner.append(prompt, true));
      const TensorInfo* ref = reference->find("logits_" + std::to_string(p));
      if (!ref) fail("{}: golden_logits has no logits_{}", dir.string(), p);
      std::vector<float> expected(ref->numel());
      convert_to_f32(ref->dtype, ref->data, expected.data(), expected.size());
      if (logits.size() != expected.size()) fail("prompt {}: {} logits, golden {}", p, logits.size(), expected.size());
      errors.push_back(relative_error(logits, expected));
      std::printf("%s prompt %zu: relative logit error %.2e\n", GetParam().c_str(), p, errors.back());
    }
    return errors;
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

INSTANTIATE_TEST_SUITE_P(Dense, CudaModelTest, ::testing::Values("llama", "llama3_rope", "qwen2", "qwen3"));

// MoE fixtures whose attention these kernels serve (deepseek_v3's MLA needs keys wider than values); gpt_oss also
// alternates sliding-window and full layers (two KV cache groups) and has attention sinks. A top-k router is a discrete choice:
// bf16 activations shift router logits enough to swap a near-tied expert now and then, and a swap in the first
// layer reaches every later position through attention (transformers' own bf16 forward does it on mixtral's
// 40-token prompt: 2.5e-1, 20 positions past 2e-2). So the goldens are checked on 2 of 3 prompts, and the whole
// MoE path against the CPU backend on the same checkpoint with every expert routed (top_k = experts: the choice
// is gone, the weights stay).
class CudaMoeModelTest : public CudaModelTest {
 protected:
  // The fixture with num_experts_per_tok raised to the expert count, in a temporary directory.
  std::filesystem::path every_expert_routed() {
    const auto out = std::filesystem::temp_directory_path() / ("tern_every_expert_" + GetParam());
    std::filesystem::remove_all(out);
    std::filesystem::create_directories(out);
    for (const auto& entry : std::filesystem::directory_iterator(dir)) {
      if (entry.path().filename() != "config.json") std::filesystem::create_symlink(entry.path(), out / entry.path().filename());
    }
    auto config = read_json(dir / "config.json");
    config["num_experts_per_tok"] = config["num_local_experts"];
    std::ofstream(out / "config.json") << config.dump();
    return out;
  }
};

TEST_P(CudaMoeModelTest, LogitsMatchTransformersOnTwoOfThreePrompts) {
  const auto errors = golden_logit_errors();
  EXPECT_GE(std::count_if(errors.begin(), errors.end(), [](double e) { return e <= 2e-2; }), 2) << GetParam();
}

TEST_P(CudaMoeModelTest, EveryExpertRoutedMatchesCpuBackend) {
  const auto every = every_expert_routed();
  auto gpu = make_cuda_backend(0);
  auto cpu = make_cpu_backend(2);
  auto gpu_model = load_model(every, *gpu);
  auto cpu_model = load_model(every, *cpu);
  const auto golden = read_json(dir / "golden.json");
  int equal = 0;
  for (const auto& prompt_json : golden["prompts"]) {
    const auto prompt = ids(prompt_json);
    SequenceRunner gpu_runner(*gpu_model, *gpu, static_cast<int64_t>(prompt.size()));
    SequenceRunner cpu_runner(*cpu_model, *cpu, static_cast<int64_t>(prompt.size()));
    const double error = relative_error(gpu->to_host_f32(gpu_runner.append(prompt, true)),
                                        cpu->to_host_f32(cpu_runner.append(prompt, true)));
    EXPECT_LE(error, 2e-2) << GetParam() << ", " << prompt.size() << " tokens";
    equal += greedy_generate(*gpu_model, *gpu, prompt, 24) == greedy_generate(*cpu_model, *cpu, prompt, 24);
  }
  EXPECT_GE(equal, 2) << GetParam() << ": greedy tokens equal on " << equal << " of " << golden["prompts"].size();
  std::filesystem::remove_all(every);
}

INSTANTIATE_TEST_SUITE_P(Moe, CudaMoeModelTest, ::testing::Values("qwen3_moe", "mixtral", "gpt_oss"));

}  // namespace
}  // namespace tern
