// The CUDA mixture-of-experts ops against the CPU reference: router top-k in every scoring mode (ids exactly,
// weights to float rounding), the expert FFN on each of its paths (bf16 intermediates, so a bf16
// tolerance) with biases, gpt-oss's clamped GLU, clamped SwiGLU and a rank's share of the experts, and the gated
// activations.
#include <algorithm>
#include <cmath>

#include "cuda_test_util.h"

namespace tern {
namespace {

using testing::random_bf16_values;
using testing::relative_error;

class CudaMoeTest : public testing::CudaVsCpuTest {
 protected:
  // A step over `num_tokens` tokens with ids below `vocab` (hash routing reads them).
  static ForwardBatch batch_of(int64_t num_tokens, int32_t vocab) {
    ForwardBatch batch;
    for (int64_t t = 0; t < num_tokens; ++t) batch.token_ids.push_back(static_cast<int32_t>((t * 7 + 3) % vocab));
    SequenceChunk seq{0, static_cast<int32_t>(num_tokens), {{}}};
    for (int64_t b = 0; b < (num_tokens + 15) / 16; ++b) seq.block_tables[0].push_back(static_cast<int32_t>(b));
    batch.sequences.push_back(seq);
    return batch;
  }
};

RouterParams router(RouterScoring scoring, int64_t top_k, bool normalize = false, float scaling = 1.0f,
                    int64_t groups = 1, int64_t top_groups = 1) {
  RouterParams params;
  params.scoring = scoring;
  params.top_k = top_k;
  params.normalize = normalize;
  params.routed_scaling = scaling;
  params.num_groups = groups;
  params.top_k_groups = top_groups;
  return params;
}

struct RouterCase {
  int64_t tokens, experts, top_k;
  RouterScoring scoring;
  bool normalize;
  float scaling;
  int64_t groups, top_groups;
  bool bias, hash;
  bool tied = false;  // logits from four values: most choices are ties, which go to the lower expert
};

TEST_F(CudaMoeTest, RouteExpertsMatchesCpu) {
  const RouterCase cases[] = {
      {1, 8, 2, RouterScoring::softmax, true, 1.0f, 1, 1, false, false},     // Qwen3-MoE, one decode token
      {37, 8, 2, RouterScoring::softmax, false, 1.0f, 1, 1, false, false},   // Mixtral
      {100, 128, 8, RouterScoring::softmax, true, 1.0f, 1, 1, false, false},  // Qwen3-30B-A3B
      {19, 32, 4, RouterScoring::softmax, true, 1.0f, 1, 1, false, false},   // gpt-oss
      {64, 256, 8, RouterScoring::sigmoid, true, 2.5f, 8, 4, true, false},    // DeepSeek-V3
      {5, 8, 2, RouterScoring::sigmoid, true, 1.0f, 2, 1, true, false},       // the deepseek_v3 fixture
      {23, 48, 6, RouterScoring::sqrt_softplus, true, 1.5f, 1, 1, true, false},  // DeepSeek-V4
      {11, 16, 3, RouterScoring::sqrt_softplus, true, 1.0f, 1, 1, false, true},  // DeepSeek-V4 hash layers
      {3, 1000, 32, RouterScoring::softmax, true, 1.0f, 1, 1, false, false},
      {1, 128, 8, RouterScoring::softmax, true, 1.0f, 1, 1, false, false},   // Qwen3-30B-A3B, one decode token
      {1, 64, 6, RouterScoring::sqrt_softplus, true, 1.5f, 1, 1, true, false},  // DeepSeek-V4-Flash, one token
      {2, 48, 6, RouterScoring::sigmoid, true, 1.0f, 4, 2, true, false},    // groups, the experts end mid-warp
      {7, 1024, 32, RouterScoring::softmax, true, 1.0f, 1, 1, false, false, true},  // 32 experts a lane, ties
      {9, 256, 8, RouterScoring::sigmoid, true, 2.5f, 8, 4, false, false, true},    // tied groups and experts
      {4, 40, 5, RouterScoring::sqrt_softplus, false, 1.0f, 1, 1, false, false, true},
  };
  for (const RouterCase& c : cases) {
    const std::string what = fmt::format("{} tokens, {} experts, top {}, scoring {}, groups {}/{}{}", c.tokens,
                                         c.experts, c.top_k, static_cast<int>(c.scoring), c.top_groups, c.groups,
                                         c.tied ? ", tied" : "");
    auto logits_values = random_bf16_values(c.tokens * c.experts, 21, 2.0f);
    if (c.tied) {
      for (float& v : logits_values) v = std::round(std::clamp(v, -1.0f, 2.0f));
    }
    const Tensor cpu_logits = cpu->from_host_f32(logits_values, {c.tokens, c.experts});
    const Tensor gpu_logits = gpu->from_host_f32(logits_values, {c.tokens, c.experts});
    RouterParams cpu_params = router(c.scoring, c.top_k, c.normalize, c.scaling, c.groups, c.top_groups);
    RouterParams gpu_params = cpu_params;
    const auto bias = weight(random_bf16_values(c.experts, 22, 0.1f), {c.experts});
    if (c.bias) {
      cpu_params.selection_bias = &bias.cpu;
      gpu_params.selection_bias = &bias.gpu;
    }
    const int32_t vocab = 50;
    std::vector<int32_t> table_values(vocab * c.top_k);
    for (size_t i = 0; i < table_values.size(); ++i) table_values[i] = static_cast<int32_t>((i * 5 + i / c.top_k) % c.experts);
    const Tensor cpu_table = cpu->from_host_i32(table_values, {vocab, c.top_k});
    const Tensor gpu_table = gpu->from_host_i32(table_values, {vocab, c.top_k});
    if (c.hash) {
      cpu_params.token_expert_table = &cpu_table;
      gpu_params.token_expert_table = &gpu_table;
    }
    const ForwardBatch batch = batch_of(c.tokens, vocab);
    const auto cpu_step = cpu->begin_step(batch);
    const auto gpu_step = gpu->begin_step(batch);
    const ExpertRouting expected = cpu->route_experts(cpu_logits, cpu_params, *cpu_step);
    const ExpertRouting got = gpu->route_experts(gpu_logits, gpu_params, *gpu_step);
    EXPECT_EQ(gpu->to_host_i32(got.expert_ids), cpu->to_host_i32(expected.expert_ids)) << what;
    EXPECT_LE(relative_error(gpu->to_host_f32(got.weights), cpu->to_host_f32(expected.weights)), 1e-5) << what;
  }
}

TEST_F(CudaMoeTest, RouteExpertsCountsLoadsAndPicksReplicasAsCpu) {
  const int64_t tokens = 29, experts = 4, top_k = 2;
  const auto logits_values = random_bf16_values(tokens * experts, 23, 2.0f);
  const Tensor cpu_logits = cpu->from_host_f32(logits_values, {tokens, experts});
  const Tensor gpu_logits = gpu->from_host_f32(logits_values, {tokens, experts});
  const std::vector<int32_t> slots = {0, 4, 5, 1, -1, -1, 2, 6, -1, 3, 7, -1};  // 8 slots, max 3 replicas
  const std::vector<int32_t> counts = {3, 1, 2, 2};
  // Counters near the 32-bit wrap, as after a long run.
  const std::vector<int32_t> start = {2147483646, -1, 5, 0};
  Tensor cpu_loads = cpu->from_host_i32(start, {experts});
  Tensor gpu_loads = gpu->from_host_i32(start, {experts});
  const Tensor cpu_slots = cpu->from_host_i32(slots, {experts, 3}), gpu_slots = gpu->from_host_i32(slots, {experts, 3});
  const Tensor cpu_counts = cpu->from_host_i32(counts, {experts}), gpu_counts = gpu->from_host_i32(counts, {experts});
  RouterParams cpu_params = router(RouterScoring::softmax, top_k, true);
  RouterParams gpu_params = cpu_params;
  cpu_params.balancing = {&cpu_loads, &cpu_slots, &cpu_counts};
  gpu_params.balancing = {&gpu_loads, &gpu_slots, &gpu_counts};
  const ForwardBatch batch = batch_of(tokens, 50);
  const auto cpu_step = cpu->begin_step(batch);
  const auto gpu_step = gpu->begin_step(batch);
  for (int call = 0; call < 2; ++call) {
    const ExpertRouting expected = cpu->route_experts(cpu_logits, cpu_params, *cpu_step);
    const ExpertRouting got = gpu->route_experts(gpu_logits, gpu_params, *gpu_step);
    EXPECT_EQ(gpu->to_host_i32(got.expert_ids), cpu->to_host_i32(expected.expert_ids)) << "call " << call;
    EXPECT_EQ(gpu->to_host_i32(gpu_loads), cpu->to_host_i32(cpu_loads)) << "call " << call;
  }
}

TEST_F(CudaMoeTest, RouteExpertsRejectsWhatItCannotRoute) {
  const auto logits = std::vector<float>(4 * 8, 0.5f);
  const Tensor gpu_logits = gpu->from_host_f32(logits, {4, 8});
  const ForwardBatch batch = batch_of(4, 10);  // the step refers to it
  const auto step = gpu->begin_step(batch);
  EXPECT_THROW(gpu->route_experts(gpu_logits, router(RouterScoring::softmax, 9), *step), Error);  // top_k > experts
  EXPECT_THROW(gpu->route_experts(gpu_logits, router(RouterScoring::sigmoid, 2, true, 1.0f, 3, 1), *step), Error);
}

enum class Glu {
  swiglu,
  clamped_swiglu,  // DeepSeek-V4's, clamped low enough that random rows cross the limit
  gpt_oss,         // gpt-oss's clamped GLU, with biases
};

const char* glu_name(Glu glu) {
  switch (glu) {
    case Glu::swiglu: return "";
    case Glu::clamped_swiglu: return ", clamped SwiGLU";
    case Glu::gpt_oss: return ", gpt-oss GLU";
  }
  return "";
}

struct ExpertsCase {
  int64_t tokens, experts, top_k, hidden, intermediate;
  Glu glu;
  int64_t first_expert, local_experts;  // this rank's share (all experts when local_experts == experts)
  bool crowded = false;                 // every token routes to experts 0 .. top_k - 1
};

TEST_F(CudaMoeTest, MoeExpertsMatchesCpu) {
  const ExpertsCase cases[] = {
      // Few rows per expert (moe_few_rows: a warp per output column) ...
      {1, 8, 2, 64, 32, Glu::swiglu, 0, 8},      // the qwen3_moe fixture, one decode token
      {4, 4, 2, 64, 64, Glu::gpt_oss, 0, 4},       // the gpt_oss fixture
      {16, 64, 2, 64, 32, Glu::swiglu, 0, 64, true},  // all 16 tokens on the same two of 64 experts: more rows than a pass
      {5, 33, 4, 64, 40, Glu::gpt_oss, 11, 11},    // a middle share, with biases
      // Decode shapes: the combine spreads a token's row over blocks of 512 columns (bf16x8 a thread).
      {1, 128, 8, 2048, 16, Glu::swiglu, 0, 128},    // Qwen3-30B-A3B, one token: 4 blocks
      {1, 64, 6, 4096, 16, Glu::swiglu, 0, 64},      // DeepSeek-V4-Flash, one token: 8 blocks
      {1, 128, 8, 2048, 16, Glu::swiglu, 32, 32},    // one token on an expert-parallel rank: slots without rows
      {3, 128, 8, 520, 16, Glu::swiglu, 0, 128},     // a few tokens, the last block one thread wide
      {16, 128, 8, 2048, 16, Glu::swiglu, 0, 128},   // batch 16
      {3, 32, 10, 136, 16, Glu::swiglu, 0, 32},      // more slots than the combine brings at once
      {4, 32, 10, 136, 16, Glu::gpt_oss, 8, 16},       // ... on a rank's share, with biases
      {2, 1500, 4, 64, 8, Glu::swiglu, 0, 1500},     // more local experts than the grouping's threads
      {600, 4096, 2, 64, 8, Glu::swiglu, 0, 4096},   // the grouping's most experts
      // The gate_up GEMM writes the activation (a warp computes a column's gate and up), on ranks' shares:
      {1, 64, 6, 256, 64, Glu::clamped_swiglu, 16, 32},  // one token
      {1, 32, 4, 128, 64, Glu::gpt_oss, 8, 16},
      {1, 16, 2, 64, 32, Glu::clamped_swiglu, 8, 8, true},  // no local pair: every tile unused
      {16, 128, 8, 256, 64, Glu::clamped_swiglu, 0, 64},     // batch 16
      {16, 64, 4, 128, 96, Glu::gpt_oss, 32, 32},
      {16, 128, 8, 128, 768, Glu::gpt_oss, 64, 64},        // Qwen3-30B-A3B's intermediate size
      // ... ten rows on each of two experts (a second pass over the weight rows after the first eight), long rows.
      {10, 10, 2, 1032, 1096, Glu::gpt_oss, 0, 10, true},
      // ... and many (64-row tensor-core tiles).
      {40, 8, 2, 64, 32, Glu::swiglu, 0, 8},
      {130, 8, 2, 136, 96, Glu::swiglu, 0, 8},   // more rows than a tile per expert, odd widths
      {300, 64, 8, 128, 48, Glu::swiglu, 0, 64},
      {128, 128, 8, 2048, 16, Glu::swiglu, 0, 128},  // Qwen3-30B-A3B at batch 128
      {57, 8, 2, 64, 32, Glu::swiglu, 4, 4},     // the second of two expert-parallel ranks
      {200, 8, 2, 64, 64, Glu::gpt_oss, 0, 8},     // the gpt_oss fixture's experts
      // The activation over the used tiles' real rows only (a block per tile and 512 columns), on ranks' shares:
      {128, 128, 8, 128, 768, Glu::clamped_swiglu, 64, 64},  // batch 128: two column blocks, the last partial
      {128, 32, 4, 128, 40, Glu::gpt_oss, 16, 16},          // a width that is no multiple of 16
      {128, 64, 6, 256, 64, Glu::swiglu, 0, 16},
      {128, 16, 2, 64, 40, Glu::clamped_swiglu, 8, 8, true},  // no local pair: every tile unused
      // ... and more than 64 a expert on average (prefill chunks): 128-row tiles of the TMA GEMM, which cross from
      // one expert's 64-row-padded rows into the next's.
      {4200, 4, 2, 64, 32, Glu::swiglu, 0, 4},
      {2100, 4, 2, 64, 64, Glu::gpt_oss, 2, 2},    // gpt-oss's GLU with biases, the second of two ranks
      {1000, 8, 2, 136, 96, Glu::swiglu, 0, 8},    // K of 136: a partial 64-value slice
      {700, 64, 8, 1024, 128, Glu::swiglu, 0, 64},  // 128-row tiles on 64 experts
      {768, 64, 8, 1024, 384, Glu::swiglu, 0, 64},  // ... 256 columns wide: gate/up 3 column tiles, down 4
      // ... over more experts than the TMA GEMM's counting threads (a run of groups each).
      {3000, 1100, 2, 64, 16, Glu::swiglu, 0, 1100},
      {4500, 4096, 2, 64, 16, Glu::swiglu, 0, 4096},
      {0, 8, 2, 64, 32, Glu::swiglu, 0, 8},      // an empty step
  };
  for (const ExpertsCase& c : cases) {
    const std::string what = fmt::format("{} tokens, {} of {} experts from {}, top {}, {}x{}{}", c.tokens,
                                         c.local_experts, c.experts, c.first_expert, c.top_k, c.hidden,
                                         c.intermediate, glu_name(c.glu));
    const auto x = input(random_bf16_values(c.tokens * c.hidden, 31), {c.tokens, c.hidden});
    const auto gate_up = weight(random_bf16_values(c.local_experts * 2 * c.intermediate * c.hidden, 32, 0.2f),
                                {c.local_experts, 2 * c.intermediate, c.hidden});
    const auto down = weight(random_bf16_values(c.local_experts * c.hidden * c.intermediate, 33, 0.2f),
                             {c.local_experts, c.hidden, c.intermediate});
    const auto gate_up_bias = weight(random_bf16_values(c.local_experts * 2 * c.intermediate, 34, 0.5f),
                                     {c.local_experts, 2 * c.intermediate});
    const auto down_bias = weight(random_bf16_values(c.local_experts * c.hidden, 35, 0.5f), {c.local_experts, c.hidden});
    const auto routing = testing::random_routing(c.tokens, c.experts, c.top_k, 36, c.crowded);
    const bool gpt_oss = c.glu == Glu::gpt_oss;
    GluActivation activation;
    if (gpt_oss) activation = {GluActivation::Kind::gpt_oss, 7.0f, 1.702f};
    if (c.glu == Glu::clamped_swiglu) activation.limit = 0.75f;
    const ExpertWeights cpu_experts{gate_up.cpu, down.cpu, gpt_oss ? &gate_up_bias.cpu : nullptr,
                                    gpt_oss ? &down_bias.cpu : nullptr, c.first_expert};
    const ExpertWeights gpu_experts{gate_up.gpu, down.gpu, gpt_oss ? &gate_up_bias.gpu : nullptr,
                                    gpt_oss ? &down_bias.gpu : nullptr, c.first_expert};
    const auto [expected, got] = moe_experts(x, routing, c.top_k, cpu_experts, gpu_experts, activation);
    ASSERT_EQ(got.shape, expected.shape) << what;
    EXPECT_LE(relative_error(gpu->to_host_f32(got), cpu->to_host_f32(expected)), 2e-2) << what;
  }
}

// One token's experts run as pair tiles (no grouping, the slots summed in the down GEMM: a warp per output column);
// the same token in a batch takes the grouped few-rows path. Where K leaves that on the warp per column too (K of
// 136 and 48: no multiple of 32) the per-row arithmetic is the same and its row must match bit for bit; where the
// batch's products run on tensor cores (kernels/moe/moe_few_rows_mma) their float32 sums add up in another order,
// and the row must match within bf16 rounding. More slots than the down GEMM loads at once (10), a rank's share
// with slots on other ranks, gpt-oss's biases.
TEST_F(CudaMoeTest, OneTokenMatchesItsRowInABatch) {
  const ExpertsCase cases[] = {
      {3, 128, 8, 256, 64, Glu::swiglu, 0, 128},
      {3, 32, 10, 136, 48, Glu::swiglu, 0, 32},
      {3, 32, 4, 128, 64, Glu::gpt_oss, 8, 16},
  };
  for (const ExpertsCase& c : cases) {
    const std::string what = fmt::format("{} of {} experts from {}, top {}, {}x{}{}", c.local_experts, c.experts,
                                         c.first_expert, c.top_k, c.hidden, c.intermediate, glu_name(c.glu));
    const std::vector<float> x_values = random_bf16_values(c.tokens * c.hidden, 51);
    const auto gate_up = weight(random_bf16_values(c.local_experts * 2 * c.intermediate * c.hidden, 52, 0.2f),
                                {c.local_experts, 2 * c.intermediate, c.hidden});
    const auto down = weight(random_bf16_values(c.local_experts * c.hidden * c.intermediate, 53, 0.2f),
                             {c.local_experts, c.hidden, c.intermediate});
    const auto gate_up_bias = weight(random_bf16_values(c.local_experts * 2 * c.intermediate, 54, 0.5f),
                                     {c.local_experts, 2 * c.intermediate});
    const auto down_bias = weight(random_bf16_values(c.local_experts * c.hidden, 55, 0.5f), {c.local_experts, c.hidden});
    const bool gpt_oss = c.glu == Glu::gpt_oss;
    const GluActivation activation = gpt_oss ? GluActivation{GluActivation::Kind::gpt_oss, 7.0f, 1.702f}
                                             : GluActivation{};
    const ExpertWeights experts{gate_up.gpu, down.gpu, gpt_oss ? &gate_up_bias.gpu : nullptr,
                                gpt_oss ? &down_bias.gpu : nullptr, c.first_expert};
    const auto [ids, weights] = testing::random_routing(c.tokens, c.experts, c.top_k, 56, false);
    const ExpertRouting batch_routing{gpu->from_host_i32(ids, {c.tokens, c.top_k}),
                                      gpu->from_host_f32(weights, {c.tokens, c.top_k})};
    const std::vector<float> batch = gpu->to_host_f32(
        gpu->moe_experts(gpu->from_host_f32(x_values, {c.tokens, c.hidden}), batch_routing, experts, activation));
    for (int64_t t = 0; t < c.tokens; ++t) {
      const auto row = [&](const auto& values, int64_t width) {
        return std::vector(values.begin() + t * width, values.begin() + (t + 1) * width);
      };
      const ExpertRouting routing{gpu->from_host_i32(row(ids, c.top_k), {1, c.top_k}),
                                  gpu->from_host_f32(row(weights, c.top_k), {1, c.top_k})};
      const Tensor alone =
          gpu->moe_experts(gpu->from_host_f32(row(x_values, c.hidden), {1, c.hidden}), routing, experts, activation);
      ASSERT_EQ(alone.shape, (std::vector<int64_t>{1, c.hidden})) << what;
      if (c.hidden % 32 != 0 && c.intermediate % 32 != 0) {
        EXPECT_EQ(gpu->to_host_f32(alone), row(batch, c.hidden)) << what << ", token " << t;
      } else {
        EXPECT_LE(relative_error(gpu->to_host_f32(alone), row(batch, c.hidden)), 1e-2) << what << ", token " << t;
      }
    }
  }
}

TEST_F(CudaMoeTest, GatedActivationsMatchCpu) {
  const GluActivation activations[] = {{GluActivation::Kind::silu, 0.0f, 1.702f},
                                       {GluActivation::Kind::silu, 1.5f, 1.702f},
                                       {GluActivation::Kind::gpt_oss, 7.0f, 1.702f},
                                       {GluActivation::Kind::gpt_oss, 0.0f, 1.0f}};
  for (const GluActivation& activation : activations) {
    for (auto [rows, width] : {std::pair{1, 8}, {9, 30}, {64, 1024}}) {
      const auto gate_up = input(random_bf16_values(rows * 2 * width, 41, 3.0f), {rows, 2 * width});
      const auto a = gpu->to_host_f32(gpu->gated_activation(gate_up.gpu, activation));
      const auto b = cpu->to_host_f32(cpu->gated_activation(gate_up.cpu, activation));
      EXPECT_LE(relative_error(a, b), 1e-2) << rows << "x" << width << " kind " << static_cast<int>(activation.kind)
                                            << " limit " << activation.limit;
    }
  }
}

}  // namespace
}  // namespace tern
