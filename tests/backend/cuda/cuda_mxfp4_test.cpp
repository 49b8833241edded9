// MXFP4 experts on the CUDA backend (gpt-oss's and DeepSeek-V4's FP4 experts): load_linear_weight keeps them as
// e2m1 codes with their e8m0 scale bytes, the MoE kernels read the codes (W4A16: the warp per column at decode, the
// tensor-core tiles otherwise) against the CPU backend's float32 experts of the same exact values, and a
// DeepSeek-V4 checkpoint in the released layout (FP4 experts) against the CPU's logits.
#include <cmath>
#include <filesystem>

#include "cuda_test_util.h"
#include "fixtures.h"
#include "golden_logits.h"
#include "model/arch/deepseek_v4/v4_released_checkpoint.h"
#include "model/model.h"
#include "model/sequence_runner.h"
#include "model/ue8m0_quantization.h"
#include "v4_without_choices.h"

namespace tern {
namespace {

using testing::random_bf16_values;
using testing::relative_error;

// A weight [n, k] quantized to e2m1 codes with a power-of-two scale per row and 32 columns (DeepSeek-V4's scheme),
// its values spread over groups of magnitudes 2^-3 to 2^3 apart, so that a scale taken from the wrong group shows.
struct Mxfp4Weight {
  Ue8m0Weight quantized;
  TensorInfo scales, codes;

  Mxfp4Weight(int64_t n, int64_t k, uint32_t seed) {
    std::vector<float> values = random_bf16_values(static_cast<size_t>(n * k), seed, 0.05f);
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t c = 0; c < k; ++c) values[r * k + c] *= std::ldexp(1.0f, static_cast<int>((r + 3 * (c / 32)) % 7) - 3);
    }
    TensorInfo source;
    source.name = "mxfp4_test.weight";
    source.dtype = DType::F32;
    source.shape = {n, k};
    source.data = reinterpret_cast<const std::byte*>(values.data());
    source.size_bytes = values.size() * sizeof(float);
    quantized = quantize_fp4_ue8m0(source);
    scales.name = "mxfp4_test.scale";
    scales.dtype = DType::F8_E8M0;
    scales.shape = quantized.scale_shape;
    scales.data = reinterpret_cast<const std::byte*>(quantized.exponents.data());
    scales.size_bytes = quantized.exponents.size();
    codes.name = "mxfp4_test.weight";
    codes.dtype = DType::F4_E2M1;
    codes.shape = {n, k};
    codes.data = reinterpret_cast<const std::byte*>(quantized.codes.data());
    codes.size_bytes = quantized.codes.size();
    codes.block_scales = BlockScales{&scales, 1, 32};
    part = &codes;
  }

  std::span<const TensorInfo* const> parts() const { return {&part, 1}; }

  const TensorInfo* part = nullptr;
};

class CudaMxfp4Test : public testing::CudaVsCpuTest {};

TEST_F(CudaMxfp4Test, LoadsCodesAndScaleBytes) {
  const Mxfp4Weight w(6, 96, 1);
  const Tensor loaded = gpu->load_linear_weight(w.parts());
  EXPECT_EQ(loaded.dtype, DType::F4_E2M1);
  ASSERT_TRUE(loaded.block_scales);
  EXPECT_EQ(loaded.block_scales->shape, (std::vector<int64_t>{6, 3}));
  EXPECT_EQ(gpu->to_host_f32(loaded), w.quantized.dequantized);
  const std::vector<float> tail = gpu->to_host_f32(loaded.rows(4, 2));
  EXPECT_EQ(tail, std::vector<float>(w.quantized.dequantized.begin() + 4 * 96, w.quantized.dequantized.end()));
  // Not through load_linear_weight: bf16 (exact: e2m1 codes times powers of two).
  EXPECT_EQ(gpu->load_weight(w.parts()).dtype, DType::BF16);
}

// Every path of the experts (the warp per column with and without the fused activation, the tiles, and many rows
// per expert, where block-FP8 and bf16 experts would take per-expert cuBLASLt GEMMs) against the CPU's float32
// experts of the same values: only bf16 activations and summation order differ.
TEST_F(CudaMxfp4Test, MoeExpertsReadTheCodes) {
  struct Case {
    int64_t tokens, experts, top_k, hidden, intermediate, first_expert, local_experts;
    bool gpt_oss;  // gpt-oss's clamped GLU with biases
  };
  for (const Case& c : {Case{1, 8, 2, 256, 128, 0, 8, false}, Case{16, 64, 4, 256, 96, 32, 32, false},
                        Case{1, 32, 4, 128, 64, 8, 16, true}, Case{40, 8, 2, 256, 128, 0, 8, true},
                        Case{130, 8, 2, 384, 160, 0, 8, false}, Case{4200, 4, 2, 256, 128, 0, 4, false}}) {
    const std::string what = fmt::format("{} tokens, {} of {} experts from {}, top {}, {}x{}{}", c.tokens,
                                         c.local_experts, c.experts, c.first_expert, c.top_k, c.hidden,
                                         c.intermediate, c.gpt_oss ? ", gpt-oss GLU" : "");
    const auto x = input(random_bf16_values(c.tokens * c.hidden, 60), {c.tokens, c.hidden});
    const Mxfp4Weight gate_up(c.local_experts * 2 * c.intermediate, c.hidden, 61);
    const Mxfp4Weight down(c.local_experts * c.hidden, c.intermediate, 62);
    const std::vector<int64_t> gate_up_shape = {c.local_experts, 2 * c.intermediate, c.hidden};
    const std::vector<int64_t> down_shape = {c.local_experts, c.hidden, c.intermediate};
    std::optional<Pair> gate_up_bias, down_bias;
    if (c.gpt_oss) {
      gate_up_bias = weight(random_bf16_values(c.local_experts * 2 * c.intermediate, 63, 0.1f),
                            {c.local_experts, 2 * c.intermediate});
      down_bias = weight(random_bf16_values(c.local_experts * c.hidden, 64, 0.1f), {c.local_experts, c.hidden});
    }
    const Tensor gpu_gate_up = gpu->load_linear_weight(gate_up.parts()).reshape(gate_up_shape);
    ASSERT_EQ(gpu_gate_up.dtype, DType::F4_E2M1) << what;
    const ExpertWeights cpu_experts{cpu->load_linear_weight(gate_up.parts()).reshape(gate_up_shape),
                                    cpu->load_linear_weight(down.parts()).reshape(down_shape),
                                    gate_up_bias ? &gate_up_bias->cpu : nullptr,
                                    down_bias ? &down_bias->cpu : nullptr, c.first_expert};
    const ExpertWeights gpu_experts{gpu_gate_up, gpu->load_linear_weight(down.parts()).reshape(down_shape),
                                    gate_up_bias ? &gate_up_bias->gpu : nullptr,
                                    down_bias ? &down_bias->gpu : nullptr, c.first_expert};
    const auto routing = testing::random_routing(c.tokens, c.experts, c.top_k, 65);
    GluActivation activation;
    if (c.gpt_oss) activation = {GluActivation::Kind::gpt_oss, 7.0f, 1.702f};
    const auto [expected, got] = moe_experts(x, routing, c.top_k, cpu_experts, gpu_experts, activation);
    ASSERT_EQ(got.shape, expected.shape) << what;
    EXPECT_LE(relative_error(gpu->to_host_f32(got), cpu->to_host_f32(expected)), 2e-2) << what;
  }
}

// DeepSeek-V4 as released (FP8 attention and shared experts, FP4 routed experts), converted from the deepseek_v4
// fixture without its discrete choices (v4_without_choices.h: rounding would otherwise swap near-tied experts):
// CUDA's logits over the golden prompts and a decode step against the CPU's (float32 over the exactly dequantized
// weights).
TEST(CudaMxfp4ModelTest, DeepseekV4ReleasedLogitsMatchTheCpuBackend) {
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  const std::filesystem::path fixture = testing::fixtures_dir() / "models" / "deepseek_v4";
  if (!std::filesystem::exists(fixture / "config.json")) GTEST_SKIP() << "fixture missing: " << fixture;
  const std::filesystem::path without_choices = testing::v4_without_choices(fixture);
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "tern_cuda_v4_released_fp4";
  std::filesystem::remove_all(dir);
  write_v4_released_checkpoint(without_choices, dir);
  std::filesystem::remove_all(without_choices);
  auto gpu = make_cuda_backend(0);
  auto cpu = make_cpu_backend(2);
  auto gpu_model = load_model(dir, *gpu);
  auto cpu_model = load_model(dir, *cpu);
  const auto golden = testing::read_json(fixture / "golden.json");
  for (const auto& prompt_json : golden["prompts"]) {
    const auto prompt = prompt_json.get<std::vector<int32_t>>();
    SequenceRunner gpu_runner(*gpu_model, *gpu, static_cast<int64_t>(prompt.size()) + 1);
    SequenceRunner cpu_runner(*cpu_model, *cpu, static_cast<int64_t>(prompt.size()) + 1);
    const double error = relative_error(gpu->to_host_f32(gpu_runner.append(prompt, true)),
                                        cpu->to_host_f32(cpu_runner.append(prompt, true)));
    std::printf("deepseek_v4 released (FP4 experts), %zu tokens: CUDA vs CPU relative logit error %.2e\n",
                prompt.size(), error);
    // Prompts of several tokens run the block-FP8 projections on the FP8 tensor cores over activations quantized
    // per row and 128 columns (W8A8), the CPU backend in float32 over the dequantized weights (W8A16), and the
    // decode step after them reads the keys and values they wrote: on an H100 1.19e-1 and 1.22e-1 at 7 and 40
    // tokens, 1.1e-1 on the decode step (the dense fixtures' 4-8e-2 in CudaOnlineFp8ModelTest; V4's eight
    // hyper-connected layers compound more). One token runs the GEMVs on the codes (W8A16): 1.1e-2. A scale of
    // the wrong block or row is off by 2x or more, far outside either bound.
    const double bound = prompt.size() > 1 ? 2e-1 : 5e-2;
    EXPECT_LE(error, bound) << prompt.size() << " tokens";
    const std::vector<int32_t> next = {prompt.back()};
    EXPECT_LE(relative_error(gpu->to_host_f32(gpu_runner.append(next, false)),
                             cpu->to_host_f32(cpu_runner.append(next, false))),
              bound)
        << "decode step";
  }
  std::filesystem::remove_all(dir);
}

// transformers' reading of an MXFP4 gpt-oss checkpoint (tests/data/README.md): CUDA's logits (bf16 activations over
// the MXFP4 experts) within twice the error of transformers' bf16 forward over the experts it dequantized, both
// against its float64 forward.
TEST(CudaTransformersMxfp4Test, LogitsWithinTwiceTheErrorOfTransformersBf16Forward) {
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  const std::filesystem::path dir = testing::test_data_dir() / "gpt_oss_mxfp4";
  const auto golden = testing::read_json(dir / "golden.json");
  const double bound = 2 * golden["bf16_relative_error"].get<double>();
  auto gpu = make_cuda_backend(0);
  auto model = load_model(dir, *gpu);
  const std::vector<double> errors = testing::prompt_logit_errors(*model, *gpu, dir);
  for (size_t p = 0; p < errors.size(); ++p) {
    std::printf("transformers' gpt-oss MXFP4, prompt %zu: CUDA vs float64 reference %.2e (bound %.2e)\n", p,
                errors[p], bound);
    EXPECT_LE(errors[p], bound) << "prompt " << p;
  }
}

}  // namespace
}  // namespace tern
