// The CPU backend's MoE ops against definitions computed by hand or by a plain dense loop: router top-k (softmax,
// normalized or not; sigmoid with group-limited top-k, selection bias and routed scaling; sqrt-softplus; hash
// tables; load counting and replica choice for EPLB), the expert FFNs (SwiGLU and gpt-oss's clamped GLU, with
// biases) and the per-group linear.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "backend/backend.h"

namespace tern {
namespace {

class MoeOpsTest : public ::testing::Test {
 protected:
  Tensor tensor(std::vector<float> values, std::vector<int64_t> shape) { return backend_->from_host_f32(values, shape); }
  ExpertRouting route(const std::vector<float>& logits, int64_t num_experts, const RouterParams& params,
                      std::vector<int32_t> token_ids = {}) {
    ForwardBatch batch;
    const int64_t num_tokens = static_cast<int64_t>(logits.size()) / num_experts;
    batch.token_ids = token_ids.empty() ? std::vector<int32_t>(num_tokens, 0) : token_ids;
    batch.sequences.push_back({0, static_cast<int32_t>(num_tokens), {{0}}});
    const auto step = backend_->begin_step(batch);
    return backend_->route_experts(tensor(logits, {num_tokens, num_experts}), params, *step);
  }
  std::vector<int32_t> ids(const ExpertRouting& r) { return backend_->to_host_i32(r.expert_ids); }
  std::vector<float> weights(const ExpertRouting& r) { return backend_->to_host_f32(r.weights); }

  std::unique_ptr<Backend> backend_ = make_cpu_backend(1);
};

TEST_F(MoeOpsTest, SoftmaxTopKWithAndWithoutNormalization) {
  const std::vector<float> logits = {1.0f, 3.0f, 2.0f, 0.0f};
  const double z = std::exp(1.0) + std::exp(3.0) + std::exp(2.0) + std::exp(0.0);
  RouterParams params;
  params.top_k = 2;
  auto r = route(logits, 4, params);
  EXPECT_EQ(ids(r), (std::vector<int32_t>{1, 2}));
  EXPECT_NEAR(weights(r)[0], std::exp(3.0) / z, 1e-6);
  EXPECT_NEAR(weights(r)[1], std::exp(2.0) / z, 1e-6);
  params.normalize = true;
  r = route(logits, 4, params);
  EXPECT_NEAR(weights(r)[0], std::exp(3.0) / (std::exp(3.0) + std::exp(2.0)), 1e-6);
  EXPECT_NEAR(weights(r)[1], std::exp(2.0) / (std::exp(3.0) + std::exp(2.0)), 1e-6);
}

TEST_F(MoeOpsTest, GroupLimitedSigmoidWithSelectionBias) {
  // 8 experts in 4 groups of 2. Sigmoid scores s; choice c = s + bias. Group scores (sum of both members' c):
  // g0 = c0 + c1, ... The best two groups win; inside them the top-2 choices are picked, weighted by s (not c),
  // normalized and scaled.
  const std::vector<float> logits = {2.0f, -1.0f, 0.5f, 0.4f, -2.0f, 3.0f, 0.0f, 0.1f};
  const std::vector<float> bias = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, -0.5f, 0.3f, 0.3f};
  std::vector<double> s(8), c(8);
  for (int e = 0; e < 8; ++e) {
    s[e] = 1.0 / (1.0 + std::exp(-logits[e]));
    c[e] = s[e] + bias[e];
  }
  // groups: g0 = c0+c1 = 0.881+0.269 = 1.150; g1 = 0.622+0.599 = 1.221; g2 = 0.119+0.453 = 0.572;
  // g3 = 0.8+0.825 = 1.625 -> groups 3 and 1; best choices there: c7 = 0.825, c6 = 0.8.
  const Tensor bias_tensor = tensor(bias, {8});
  RouterParams params;
  params.scoring = RouterScoring::sigmoid;
  params.top_k = 2;
  params.normalize = true;
  params.routed_scaling = 2.5f;
  params.num_groups = 4;
  params.top_k_groups = 2;
  params.selection_bias = &bias_tensor;
  const auto r = route(logits, 8, params);
  EXPECT_EQ(ids(r), (std::vector<int32_t>{7, 6}));
  EXPECT_NEAR(weights(r)[0], 2.5 * s[7] / (s[6] + s[7]), 1e-6);
  EXPECT_NEAR(weights(r)[1], 2.5 * s[6] / (s[6] + s[7]), 1e-6);
  // Without groups expert 0 (c = 0.881) would win over expert 6.
  params.num_groups = 1;
  params.top_k_groups = 1;
  EXPECT_EQ(ids(route(logits, 8, params)), (std::vector<int32_t>{0, 7}));
}

TEST_F(MoeOpsTest, HashRoutingTakesExpertsFromTheTokenTable) {
  const std::vector<float> logits = {0.5f, -1.0f, 2.0f, 0.0f, 1.0f, 1.0f, 1.0f, 1.0f};
  const std::vector<int32_t> table = {0, 1, 3, 2, 1, 0};  // token t -> experts {table[2t], table[2t+1]}
  const Tensor table_tensor = backend_->from_host_i32(table, {3, 2});
  RouterParams params;
  params.scoring = RouterScoring::sqrt_softplus;
  params.top_k = 2;
  params.normalize = true;
  params.token_expert_table = &table_tensor;
  const auto r = route(logits, 4, params, {1, 2});
  EXPECT_EQ(ids(r), (std::vector<int32_t>{3, 2, 1, 0}));
  auto score = [](double x) { return std::sqrt(std::log1p(std::exp(x))); };
  EXPECT_NEAR(weights(r)[0], score(0.0) / (score(0.0) + score(2.0)), 1e-6);
  EXPECT_NEAR(weights(r)[2], 0.5, 1e-6);
}

TEST_F(MoeOpsTest, BalancingCountsLogicalExpertsAndPicksReplicasByTokenRow) {
  // 6 tokens over 4 experts, top-2 softmax; the routing without balancing is the reference.
  constexpr int64_t kTokens = 6, kExperts = 4;
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> logits(kTokens * kExperts);
  for (float& v : logits) v = normal(rng);
  RouterParams params;
  params.top_k = 2;
  const auto plain = route(logits, kExperts, params);
  const auto plain_ids = ids(plain);

  // Slots: expert 0 in slots {0, 4, 5}, expert 1 in {1}, expert 2 in {2, 6}, expert 3 in {3, 7}.
  const std::vector<int32_t> replica_slots = {0, 4, 5, 1, -1, -1, 2, 6, -1, 3, 7, -1};
  const std::vector<int32_t> replica_counts = {3, 1, 2, 2};
  const Tensor slots_tensor = backend_->from_host_i32(replica_slots, {kExperts, 3});
  const Tensor counts_tensor = backend_->from_host_i32(replica_counts, {kExperts});
  // Counters that already hold counts near the 32-bit wrap: the op adds to them.
  const std::vector<int32_t> start = {0, -1, 7, 2147483647};
  Tensor load = backend_->from_host_i32(start, {kExperts});
  params.balancing = {&load, &slots_tensor, &counts_tensor};
  const auto balanced = route(logits, kExperts, params);
  route(logits, kExperts, params);  // a second step adds the same counts again

  std::vector<uint32_t> recount(kExperts, 0);
  const auto balanced_ids = ids(balanced);
  for (int64_t t = 0; t < kTokens; ++t) {
    for (int64_t j = 0; j < 2; ++j) {
      const int32_t e = plain_ids[t * 2 + j];
      recount[e] += 2;
      EXPECT_EQ(balanced_ids[t * 2 + j], replica_slots[e * 3 + t % replica_counts[e]]) << "token " << t;
    }
  }
  EXPECT_EQ(weights(balanced), weights(plain));
  const auto counted = backend_->to_host_i32(load);
  for (int64_t e = 0; e < kExperts; ++e) {
    EXPECT_EQ(static_cast<uint32_t>(counted[e]) - static_cast<uint32_t>(start[e]), recount[e]) << "expert " << e;
  }
}

// Expert FFNs against a dense loop over every (token, chosen expert) pair.
// With `split_experts`, the sum of two calls that each hold half of the experts (expert parallelism).
void check_experts_against_dense_loop(Backend& backend, const GluActivation& activation, bool biases,
                                      bool split_experts = false) {
  const int64_t tokens = 5, hidden = 16, inter = 8, experts = 4, k = 2;
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto random = [&](int64_t n) {
    std::vector<float> v(n);
    for (float& x : v) x = normal(rng);
    return v;
  };
  const auto x = random(tokens * hidden), gate_up = random(experts * 2 * inter * hidden),
             down = random(experts * hidden * inter), gate_up_bias = random(experts * 2 * inter),
             down_bias = random(experts * hidden);
  const std::vector<int32_t> chosen = {0, 3, 2, 3, 1, 0, 3, 1, 2, 0};
  const std::vector<float> w = {0.7f, 0.3f, 0.5f, 0.5f, 0.9f, 0.1f, 0.2f, 0.8f, 0.6f, 0.4f};
  ExpertRouting routing{backend.from_host_i32(chosen, {tokens, k}), backend.from_host_f32(w, {tokens, k})};
  const Tensor input = backend.from_host_f32(x, {tokens, hidden});
  // Experts [first, first + count) only, as one rank of expert parallelism holds them.
  auto run_experts = [&](int64_t first, int64_t count) {
    auto rows = [&](const std::vector<float>& v, int64_t per_expert) {
      return std::vector<float>(v.begin() + first * per_expert, v.begin() + (first + count) * per_expert);
    };
    const Tensor gate_up_t = backend.from_host_f32(rows(gate_up, 2 * inter * hidden), {count, 2 * inter, hidden});
    const Tensor gate_up_bias_t = backend.from_host_f32(rows(gate_up_bias, 2 * inter), {count, 2 * inter});
    const Tensor down_bias_t = backend.from_host_f32(rows(down_bias, hidden), {count, hidden});
    ExpertWeights weights{gate_up_t, backend.from_host_f32(rows(down, hidden * inter), {count, hidden, inter}),
                          biases ? &gate_up_bias_t : nullptr, biases ? &down_bias_t : nullptr, first};
    return backend.to_host_f32(backend.moe_experts(input, routing, weights, activation));
  };
  std::vector<float> out = run_experts(0, experts);
  if (split_experts) {  // two ranks' shares, summed as the all-reduce does
    out = run_experts(0, experts / 2);
    const auto second = run_experts(experts / 2, experts / 2);
    for (size_t i = 0; i < out.size(); ++i) out[i] += second[i];
  }
  for (int64_t t = 0; t < tokens; ++t) {
    std::vector<double> expected(hidden, 0.0);
    for (int64_t j = 0; j < k; ++j) {
      const int64_t e = chosen[t * k + j];
      std::vector<double> act(inter);
      for (int64_t i = 0; i < inter; ++i) {
        double g = biases ? gate_up_bias[e * 2 * inter + i] : 0.0, u = biases ? gate_up_bias[e * 2 * inter + inter + i] : 0.0;
        for (int64_t h = 0; h < hidden; ++h) {
          g += gate_up[(e * 2 * inter + i) * hidden + h] * x[t * hidden + h];
          u += gate_up[(e * 2 * inter + inter + i) * hidden + h] * x[t * hidden + h];
        }
        if (activation.limit > 0) {
          g = std::min<double>(g, activation.limit);
          u = std::clamp<double>(u, -activation.limit, activation.limit);
        }
        act[i] = activation.kind == GluActivation::Kind::silu ? g / (1 + std::exp(-g)) * u
                                                              : (u + 1) * g / (1 + std::exp(-activation.alpha * g));
      }
      for (int64_t h = 0; h < hidden; ++h) {
        double y = biases ? down_bias[e * hidden + h] : 0.0;
        for (int64_t i = 0; i < inter; ++i) y += down[(e * hidden + h) * inter + i] * act[i];
        expected[h] += w[t * k + j] * y;
      }
    }
    for (int64_t h = 0; h < hidden; ++h) {
      EXPECT_NEAR(out[t * hidden + h], expected[h], 1e-3 * (1 + std::abs(expected[h]))) << t << "," << h;
    }
  }
}

TEST_F(MoeOpsTest, SwigluExpertsMatchDenseLoop) { check_experts_against_dense_loop(*backend_, {}, false); }

TEST_F(MoeOpsTest, TwoHalvesOfTheExpertsSumToAllOfThem) {
  GluActivation activation;
  activation.kind = GluActivation::Kind::gpt_oss;
  activation.limit = 1.5f;
  check_experts_against_dense_loop(*backend_, activation, true, true);
}

TEST_F(MoeOpsTest, ClampedGptOssExpertsWithBiasesMatchDenseLoop) {
  GluActivation activation;
  activation.kind = GluActivation::Kind::gpt_oss;
  activation.limit = 1.5f;  // small enough that the random inputs hit both clamps
  check_experts_against_dense_loop(*backend_, activation, true);
}

TEST_F(MoeOpsTest, GroupedLinearMultipliesEachGroupByItsOwnWeight) {
  // x [1, 2 groups, 2], weight [2 groups, 1, 2]
  const auto out = backend_->to_host_f32(
      backend_->grouped_linear(tensor({1, 2, 3, 4}, {1, 2, 2}), tensor({10, 100, -1, 1}, {2, 1, 2})));
  EXPECT_EQ(out, (std::vector<float>{210, 1}));
}

TEST_F(MoeOpsTest, InterleavedRopeOnTrailingDimsAndItsInverse) {
  RopeTable table;
  table.inv_freq = tensor({1.0f}, {1});
  table.rotary_dim = 2;
  table.interleaved = true;
  table.rotate_last_dims = true;
  Tensor x = tensor({5, 1, 0}, {1, 1, 3});
  const std::vector<int32_t> position = {1};
  backend_->rope_at(x, table, position, false);
  auto v = backend_->to_host_f32(x);
  EXPECT_FLOAT_EQ(v[0], 5.0f);  // leading dim untouched
  EXPECT_NEAR(v[1], std::cos(1.0), 1e-6);
  EXPECT_NEAR(v[2], std::sin(1.0), 1e-6);
  backend_->rope_at(x, table, position, true);
  v = backend_->to_host_f32(x);
  EXPECT_NEAR(v[1], 1.0, 1e-6);
  EXPECT_NEAR(v[2], 0.0, 1e-6);
}

}  // namespace
}  // namespace tern
