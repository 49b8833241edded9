// The CPU reference of the mixture-of-experts ops: router top-k, expert FFNs, gated activations, per-group linear.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "backend/cpu/host_tensor.h"
#include "core/error.h"

namespace tern::cpu {

namespace {

std::vector<float> host_f32(const Tensor& t) {
  std::vector<float> out(t.numel());
  convert_to_f32(t.dtype, t.data, out.data(), out.size());
  return out;
}

float router_score(RouterScoring scoring, float logit) {
  switch (scoring) {
    case RouterScoring::sigmoid:
      return 1.0f / (1.0f + std::exp(-logit));
    case RouterScoring::sqrt_softplus:
      // torch's softplus returns x itself past its threshold of 20
      return std::sqrt(logit > 20.0f ? logit : std::log1p(std::exp(logit)));
    case RouterScoring::softmax:
      break;
  }
  fail("router_score: softmax is computed over the whole row");
}

// Indices of the `k` largest values, largest first; ties go to the lower index.
std::vector<int32_t> top_k_indices(const std::vector<float>& values, int64_t k) {
  std::vector<int32_t> order(values.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return values[a] > values[b]; });
  order.resize(k);
  return order;
}

void apply_activation(const float* gate, const float* up, float* out, int64_t width, const GluActivation& act) {
  for (int64_t i = 0; i < width; ++i) {
    float g = gate[i];
    float u = up[i];
    if (act.limit > 0.0f) {
      g = std::min(g, act.limit);
      u = std::clamp(u, -act.limit, act.limit);
    }
    if (act.kind == GluActivation::Kind::silu) {
      out[i] = g / (1.0f + std::exp(-g)) * u;
    } else {
      out[i] = (u + 1.0f) * (g / (1.0f + std::exp(-g * act.alpha)));
    }
  }
}

}  // namespace

Tensor gated_activation(const Tensor& gate_up, const GluActivation& activation) {
  if (gate_up.dtype != DType::F32) fail("gated_activation: expects float32 activations");
  const int64_t width = gate_up.size(-1) / 2;
  const int64_t num_rows = gate_up.numel() / (2 * width);
  Tensor out = host_tensor(DType::F32, {num_rows, width});
  for (int64_t r = 0; r < num_rows; ++r) {
    const float* gate = gate_up.ptr<float>() + r * 2 * width;
    apply_activation(gate, gate + width, out.ptr<float>() + r * width, width, activation);
  }
  return out;
}

ExpertRouting route_experts(const Tensor& logits, const RouterParams& params, std::span<const int32_t> token_ids) {
  if (logits.dtype != DType::F32) fail("route_experts: expects float32 logits");
  const int64_t num_experts = logits.size(-1);
  const int64_t num_tokens = logits.numel() / num_experts;
  const int64_t k = params.top_k;
  if (k <= 0 || k > num_experts) fail("route_experts: top_k {} with {} experts", k, num_experts);
  if (params.num_groups <= 0 || num_experts % params.num_groups != 0 || params.top_k_groups <= 0 ||
      params.top_k_groups > params.num_groups) {
    fail("route_experts: {} experts cannot form {} groups with {} chosen", num_experts, params.num_groups,
         params.top_k_groups);
  }
  std::vector<float> bias(num_experts, 0.0f);
  if (params.selection_bias) {
    if (params.selection_bias->numel() != num_experts) fail("route_experts: selection bias size differs from experts");
    bias = host_f32(*params.selection_bias);
  }
  if (params.token_expert_table) {
    if (params.token_expert_table->dtype != DType::I32 || params.token_expert_table->size(-1) != k) {
      fail("route_experts: the token->expert table must be int32 [vocab, {}]", k);
    }
    if (static_cast<int64_t>(token_ids.size()) != num_tokens) fail("route_experts: hash routing needs token ids");
  }
  const ExpertLoadBalancing& balancing = params.balancing;
  uint32_t* load_counts = nullptr;  // unsigned: the counters wrap, readers take differences
  if (balancing.load_counts) {
    if (balancing.load_counts->dtype != DType::I32 || balancing.load_counts->numel() != num_experts) {
      fail("route_experts: load counts must be int32 [{}]", num_experts);
    }
    load_counts = reinterpret_cast<uint32_t*>(balancing.load_counts->ptr<int32_t>());
  }
  if ((balancing.replica_slots == nullptr) != (balancing.replica_counts == nullptr)) {
    fail("route_experts: replica slots and replica counts come together");
  }
  const int32_t* replica_slots = nullptr;
  const int32_t* replica_counts = nullptr;
  int64_t max_replicas = 0;
  if (balancing.replica_slots) {
    if (balancing.replica_slots->dtype != DType::I32 || balancing.replica_slots->shape.size() != 2 ||
        balancing.replica_slots->size(0) != num_experts || balancing.replica_counts->dtype != DType::I32 ||
        balancing.replica_counts->numel() != num_experts) {
      fail("route_experts: replica tables must be int32 [{0}, max_replicas] and [{0}]", num_experts);
    }
    replica_slots = balancing.replica_slots->ptr<int32_t>();
    replica_counts = balancing.replica_counts->ptr<int32_t>();
    max_replicas = balancing.replica_slots->size(1);
    for (int64_t e = 0; e < num_experts; ++e) {
      if (replica_counts[e] < 1 || replica_counts[e] > max_replicas) {
        fail("route_experts: expert {} has {} replicas, not in [1, {}]", e, replica_counts[e], max_replicas);
      }
    }
  }
  ExpertRouting routing{host_tensor(DType::I32, {num_tokens, k}), host_tensor(DType::F32, {num_tokens, k})};
  const int64_t group_size = num_experts / params.num_groups;
  std::vector<float> scores(num_experts), choice(num_experts), group_scores(params.num_groups);
  for (int64_t t = 0; t < num_tokens; ++t) {
    const float* row = logits.ptr<float>() + t * num_experts;
    if (params.scoring == RouterScoring::softmax) {
      const float max_logit = *std::max_element(row, row + num_experts);
      float sum = 0.0f;
      for (int64_t e = 0; e < num_experts; ++e) sum += scores[e] = std::exp(row[e] - max_logit);
      for (float& s : scores) s /= sum;
    } else {
      for (int64_t e = 0; e < num_experts; ++e) scores[e] = router_score(params.scoring, row[e]);
    }
    std::vector<int32_t> chosen;
    if (params.token_expert_table) {
      const int64_t vocab = params.token_expert_table->size(0);
      if (token_ids[t] < 0 || token_ids[t] >= vocab) fail("route_experts: token {} outside the hash table", token_ids[t]);
      const int32_t* ids = params.token_expert_table->ptr<int32_t>() + token_ids[t] * k;
      chosen.assign(ids, ids + k);
    } else {
      for (int64_t e = 0; e < num_experts; ++e) choice[e] = scores[e] + bias[e];
      if (params.num_groups > 1) {
        for (int64_t g = 0; g < params.num_groups; ++g) {
          std::vector<float> members(choice.begin() + g * group_size, choice.begin() + (g + 1) * group_size);
          const auto best = top_k_indices(members, std::min<int64_t>(2, group_size));
          group_scores[g] = 0.0f;
          for (int32_t i : best) group_scores[g] += members[i];
        }
        std::vector<bool> keep(params.num_groups, false);
        for (int32_t g : top_k_indices(group_scores, params.top_k_groups)) keep[g] = true;
        // transformers masks the other groups' scores to 0, not -inf; kept as is so choices match.
        for (int64_t e = 0; e < num_experts; ++e) {
          if (!keep[e / group_size]) choice[e] = 0.0f;
        }
      }
      chosen = top_k_indices(choice, k);
    }
    float sum = 0.0f;
    for (int64_t j = 0; j < k; ++j) {
      if (chosen[j] < 0 || chosen[j] >= num_experts) fail("route_experts: expert {} out of range", chosen[j]);
      sum += scores[chosen[j]];
    }
    for (int64_t j = 0; j < k; ++j) {
      float w = scores[chosen[j]];
      if (params.normalize) w /= sum + 1e-20f;
      const int32_t expert = chosen[j];
      if (load_counts) ++load_counts[expert];
      routing.expert_ids.ptr<int32_t>()[t * k + j] =
          replica_slots ? replica_slots[expert * max_replicas + t % replica_counts[expert]] : expert;
      routing.weights.ptr<float>()[t * k + j] = w * params.routed_scaling;
    }
  }
  return routing;
}

Tensor moe_experts(const Tensor& x, const ExpertRouting& routing, const ExpertWeights& experts,
                   const GluActivation& activation) {
  if (x.dtype != DType::F32) fail("moe_experts: expects float32 activations");
  const auto [num_experts, hidden, intermediate, num_tokens, k] = moe_shape(x, routing, experts);
  const std::vector<float> gate_up_bias = experts.gate_up_bias ? host_f32(*experts.gate_up_bias) : std::vector<float>{};
  const std::vector<float> down_bias = experts.down_bias ? host_f32(*experts.down_bias) : std::vector<float>{};
  const int32_t* ids = routing.expert_ids.ptr<int32_t>();
  const float* weights = routing.weights.ptr<float>();

  Tensor out = host_tensor(DType::F32, {num_tokens, hidden});
  std::fill_n(out.ptr<float>(), out.numel(), 0.0f);
  std::vector<float> rows, gate_up, act, down;
  // Experts in increasing order, each adding its weighted output, as transformers' expert loop does.
  for (int64_t e = 0; e < num_experts; ++e) {
    std::vector<int64_t> tokens, slots;
    for (int64_t t = 0; t < num_tokens; ++t) {
      for (int64_t j = 0; j < k; ++j) {
        if (ids[t * k + j] == experts.first_expert + e) {
          tokens.push_back(t);
          slots.push_back(t * k + j);
        }
      }
    }
    if (tokens.empty()) continue;
    const int64_t n = static_cast<int64_t>(tokens.size());
    rows.resize(n * hidden);
    for (int64_t i = 0; i < n; ++i) {
      std::copy_n(x.ptr<float>() + tokens[i] * hidden, hidden, rows.data() + i * hidden);
    }
    gate_up.resize(n * 2 * intermediate);
    matmul_rows(rows.data(), n, hidden, experts.gate_up, e * 2 * intermediate, 2 * intermediate,
                gate_up_bias.empty() ? nullptr : gate_up_bias.data() + e * 2 * intermediate, gate_up.data());
    act.resize(n * intermediate);
    for (int64_t i = 0; i < n; ++i) {
      const float* g = gate_up.data() + i * 2 * intermediate;
      apply_activation(g, g + intermediate, act.data() + i * intermediate, intermediate, activation);
    }
    down.resize(n * hidden);
    matmul_rows(act.data(), n, intermediate, experts.down, e * hidden, hidden,
                down_bias.empty() ? nullptr : down_bias.data() + e * hidden, down.data());
    for (int64_t i = 0; i < n; ++i) {
      float* o = out.ptr<float>() + tokens[i] * hidden;
      const float w = weights[slots[i]];
      for (int64_t d = 0; d < hidden; ++d) o[d] += down[i * hidden + d] * w;
    }
  }
  return out;
}

Tensor grouped_linear(const Tensor& x, const Tensor& weight) {
  if (x.dtype != DType::F32) fail("grouped_linear: expects float32 activations");
  const int64_t groups = weight.size(0);
  const int64_t n = weight.size(1);
  const int64_t k = weight.size(2);
  if (x.size(-1) != k || x.numel() % (groups * k) != 0) {
    fail("grouped_linear: input of shape {} does not fit {} groups of {} features", shape_string(x.shape), groups, k);
  }
  const int64_t num_rows = x.numel() / (groups * k);
  Tensor out = host_tensor(DType::F32, {num_rows, groups, n});
  std::vector<float> rows(num_rows * k), result(num_rows * n);
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t t = 0; t < num_rows; ++t) std::copy_n(x.ptr<float>() + (t * groups + g) * k, k, rows.data() + t * k);
    matmul_rows(rows.data(), num_rows, k, weight, g * n, n, nullptr, result.data());
    for (int64_t t = 0; t < num_rows; ++t) std::copy_n(result.data() + t * n, n, out.ptr<float>() + (t * groups + g) * n);
  }
  return out;
}

}  // namespace tern::cpu
