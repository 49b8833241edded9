#include <stdexcept>
#include <string>

#include "common/dependent_launch.cuh"
#include "common/device_math.cuh"
#include "moe/moe_routing.h"

namespace tern::kernels {

namespace {

constexpr int kWarpsPerBlock = 4;
constexpr unsigned kFullWarp = 0xffffffffu;

// Float bits mapped so that unsigned order is float order, for the warp's one-instruction reductions (redux.sync).
// Adding +0 first turns -0 into +0, which compares equal to it as floats.
__device__ __forceinline__ uint32_t ordered_bits(float v) {
  const uint32_t bits = __float_as_uint(v + 0.0f);
  return bits & 0x80000000u ? ~bits : bits | 0x80000000u;
}

__device__ __forceinline__ float from_ordered_bits(uint32_t key) {
  return __uint_as_float(key & 0x80000000u ? key & 0x7fffffffu : ~key);
}

// This lane's best entry of values[0, n) not yet taken (lane l holds entries l, l + 32, ..., bit i of `taken` marks
// entry l + 32 i), as its ordered bits and index; index INT_MAX when none is left. Ties go to the lower index.
__device__ __forceinline__ void lane_best(const float* values, int n, uint32_t taken, uint32_t& key, int& index) {
  key = 0;
  index = INT_MAX;
  for (int i = 0, e = threadIdx.x % 32; e < n; ++i, e += 32) {
    const uint32_t k = ordered_bits(values[e]);
    if (!(taken >> i & 1u) && (index == INT_MAX || k > key)) {
      key = k;
      index = e;
    }
  }
}

// The best `count` of `values[0, n)` (count <= n, count <= 32), the larger value first and on a tie the lower index
// (a stable descending sort's order): lane j < count returns the j-th, the other lanes -1. Each round is two warp
// reductions (the best value, then the lowest index holding it) and a rescan by the one lane whose entry won.
// `taken` gains the chosen entries, bit i of lane l for entry l + 32 i (at most 32 entries a lane).
__device__ int warp_top(const float* values, int n, int count, uint32_t& taken) {
  const int lane = threadIdx.x % 32;
  uint32_t key;
  int index;
  lane_best(values, n, taken, key, index);
  int mine = -1;
  for (int j = 0; j < count; ++j) {
    const uint32_t best_key = __reduce_max_sync(kFullWarp, key);
    const int best = __reduce_min_sync(kFullWarp, key == best_key ? index : INT_MAX);
    if (lane == j) mine = best;
    if (index == best) {
      taken |= 1u << (best / 32);
      lane_best(values, n, taken, key, index);
    }
  }
  return mine;
}

__device__ __forceinline__ float score_of(RouterScoringKind scoring, float logit) {
  if (scoring == RouterScoringKind::sigmoid) return 1.0f / (1.0f + expf(-logit));
  // torch's softplus returns x itself past its threshold of 20
  return sqrtf(logit > 20.0f ? logit : log1pf(expf(logit)));
}

__global__ void __launch_bounds__(kWarpsPerBlock * 32) route_experts_kernel(RouterKernelParams p) {
  extern __shared__ float shared[];
  wait_for_prior_grids();
  allow_dependent_grids();
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int t = blockIdx.x * kWarpsPerBlock + warp;
  if (t >= p.num_tokens) return;
  const int E = p.num_experts;
  float* scores = shared + warp * 3 * E;
  float* choice = scores + E;
  float* group_scores = choice + E;
  const float* row = p.logits + static_cast<int64_t>(t) * E;

  if (p.scoring == RouterScoringKind::softmax) {
    float max_logit = -INFINITY;
    for (int e = lane; e < E; e += 32) max_logit = fmaxf(max_logit, row[e]);
    max_logit = from_ordered_bits(__reduce_max_sync(kFullWarp, ordered_bits(max_logit)));
    float sum = 0.0f;
    for (int e = lane; e < E; e += 32) sum += scores[e] = expf(row[e] - max_logit);
    sum = warp_sum(sum);
    for (int e = lane; e < E; e += 32) scores[e] /= sum;
  } else {
    for (int e = lane; e < E; e += 32) scores[e] = score_of(p.scoring, row[e]);
  }
  __syncwarp();

  int expert;  // lane j < top_k: the token's j-th expert
  if (p.token_expert_table) {
    expert = lane < p.top_k ? p.token_expert_table[static_cast<int64_t>(p.token_ids[t]) * p.top_k + lane] : -1;
  } else {
    for (int e = lane; e < E; e += 32) choice[e] = scores[e] + (p.selection_bias ? p.selection_bias[e] : 0.0f);
    __syncwarp();
    if (p.num_groups > 1) {
      const int group_size = E / p.num_groups;
      for (int g = lane; g < p.num_groups; g += 32) {
        // The sum of the group's two best choice values (one when a group has a single expert).
        float first = -INFINITY, second = -INFINITY;
        for (int e = g * group_size; e < (g + 1) * group_size; ++e) {
          const float v = choice[e];
          if (v > first) {
            second = first;
            first = v;
          } else if (v > second) {
            second = v;
          }
        }
        group_scores[g] = group_size >= 2 ? first + second : first;
      }
      __syncwarp();
      uint32_t kept = 0;  // bit i of lane l: group l + 32 i is kept
      warp_top(group_scores, p.num_groups, p.top_k_groups, kept);
      // transformers masks the other groups' scores to 0, not -inf; kept as is so choices match.
      for (int base = 0; base < E; base += 32) {
        const int e = base + lane;
        const int g = min(e, E - 1) / group_size;  // lanes past the end still take part in the shuffle
        const bool keep = __shfl_sync(kFullWarp, kept, g % 32) >> (g / 32) & 1u;
        if (e < E && !keep) choice[e] = 0.0f;
      }
      __syncwarp();
    }
    uint32_t taken = 0;
    expert = warp_top(choice, E, p.top_k, taken);
  }

  const float score = lane < p.top_k ? scores[expert] : 0.0f;
  const float sum = warp_sum(score);
  if (lane < p.top_k) {
    const float w = p.normalize ? score / (sum + 1e-20f) : score;
    if (p.load_counts) atomicAdd(p.load_counts + expert, 1u);
    p.expert_ids[static_cast<int64_t>(t) * p.top_k + lane] =
        p.replica_slots ? p.replica_slots[expert * p.max_replicas + t % p.replica_counts[expert]] : expert;
    p.weights[static_cast<int64_t>(t) * p.top_k + lane] = w * p.routed_scaling;
  }
}

}  // namespace

void launch_route_experts(const RouterKernelParams& p, cudaStream_t stream) {
  if (p.num_experts <= 0 || p.num_experts > kRouterMaxExperts) {
    throw std::invalid_argument("route_experts: " + std::to_string(p.num_experts) + " experts (at most " +
                                std::to_string(kRouterMaxExperts) + ")");
  }
  if (p.top_k <= 0 || p.top_k > p.num_experts || p.top_k > kRouterMaxTopK) {
    throw std::invalid_argument("route_experts: top_k " + std::to_string(p.top_k) + " with " +
                                std::to_string(p.num_experts) + " experts (at most " +
                                std::to_string(kRouterMaxTopK) + ")");
  }
  if (p.num_groups <= 0 || p.num_experts % p.num_groups != 0 || p.top_k_groups <= 0 ||
      p.top_k_groups > p.num_groups || (p.num_groups > 1 && p.top_k_groups > kRouterMaxExperts / 32)) {
    throw std::invalid_argument("route_experts: " + std::to_string(p.num_experts) + " experts cannot form " +
                                std::to_string(p.num_groups) + " groups with " + std::to_string(p.top_k_groups) +
                                " chosen");
  }
  if (p.token_expert_table && !p.token_ids) throw std::invalid_argument("route_experts: hash routing needs token ids");
  if ((p.replica_slots == nullptr) != (p.replica_counts == nullptr) || (p.replica_slots && p.max_replicas < 1)) {
    throw std::invalid_argument("route_experts: replica slots and replica counts come together");
  }
  if (p.num_tokens == 0) return;
  const size_t shared_bytes = size_t{kWarpsPerBlock} * 3 * p.num_experts * sizeof(float);
  const unsigned blocks = static_cast<unsigned>((p.num_tokens + kWarpsPerBlock - 1) / kWarpsPerBlock);
  launch_dependent("route_experts", route_experts_kernel, blocks, kWarpsPerBlock * 32, shared_bytes, stream, p);
}

}  // namespace tern::kernels
