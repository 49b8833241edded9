#include <stdexcept>
#include <string>

#include "common/device_math.cuh"
#include "moe/moe_routing.h"

namespace tern::kernels {

namespace {

constexpr int kWarpsPerBlock = 4;

// (value, index) with the larger value winning and, on a tie, the lower index (a stable descending sort's order).
struct Candidate {
  float value;
  int index;
};

__device__ __forceinline__ bool better(const Candidate& a, const Candidate& b) {
  return a.value > b.value || (a.value == b.value && a.index < b.index);
}

__device__ __forceinline__ Candidate warp_best(Candidate c) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    const Candidate other{__shfl_xor_sync(0xffffffffu, c.value, offset), __shfl_xor_sync(0xffffffffu, c.index, offset)};
    if (better(other, c)) c = other;
  }
  return c;
}

// The best `count` of `values[0, n)` (lane l holds entries l, l + 32, ...; at most 32 per lane), best first.
// `taken` marks a lane's entries already chosen, bit i for entry lane + 32 * i.
__device__ void warp_top(const float* values, int n, int count, int* chosen, uint32_t& taken) {
  const int lane = threadIdx.x % 32;
  for (int j = 0; j < count; ++j) {
    Candidate mine{-INFINITY, INT_MAX};
    for (int i = 0, e = lane; e < n; ++i, e += 32) {
      const Candidate c{values[e], e};
      if (!(taken >> i & 1u) && (mine.index == INT_MAX || better(c, mine))) mine = c;
    }
    const Candidate best = warp_best(mine);
    chosen[j] = best.index;
    if (best.index % 32 == lane) taken |= 1u << (best.index / 32);
  }
}

__device__ __forceinline__ float score_of(RouterScoringKind scoring, float logit) {
  if (scoring == RouterScoringKind::sigmoid) return 1.0f / (1.0f + expf(-logit));
  // torch's softplus returns x itself past its threshold of 20
  return sqrtf(logit > 20.0f ? logit : log1pf(expf(logit)));
}

__global__ void route_experts_kernel(RouterKernelParams p) {
  extern __shared__ float shared[];
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
    max_logit = warp_max(max_logit);
    float sum = 0.0f;
    for (int e = lane; e < E; e += 32) sum += scores[e] = expf(row[e] - max_logit);
    sum = warp_sum(sum);
    for (int e = lane; e < E; e += 32) scores[e] /= sum;
  } else {
    for (int e = lane; e < E; e += 32) scores[e] = score_of(p.scoring, row[e]);
  }
  __syncwarp();

  int chosen[kRouterMaxTopK];
  if (p.token_expert_table) {
    const int32_t* ids = p.token_expert_table + static_cast<int64_t>(p.token_ids[t]) * p.top_k;
    for (int j = 0; j < p.top_k; ++j) chosen[j] = ids[j];
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
      int kept_groups[kRouterMaxExperts / 32];
      uint32_t kept = 0;
      warp_top(group_scores, p.num_groups, p.top_k_groups, kept_groups, kept);
      __syncwarp();
      // transformers masks the other groups' scores to 0, not -inf; kept as is so choices match.
      for (int e = lane; e < E; e += 32) {
        bool keep = false;
        for (int j = 0; j < p.top_k_groups; ++j) keep = keep || kept_groups[j] == e / group_size;
        if (!keep) choice[e] = 0.0f;
      }
      __syncwarp();
    }
    uint32_t taken = 0;
    warp_top(choice, E, p.top_k, chosen, taken);
  }

  float sum = 0.0f;
  for (int j = 0; j < p.top_k; ++j) sum += scores[chosen[j]];
  for (int j = lane; j < p.top_k; j += 32) {
    const int expert = chosen[j];
    float w = scores[expert];
    if (p.normalize) w /= sum + 1e-20f;
    if (p.load_counts) atomicAdd(p.load_counts + expert, 1u);
    p.expert_ids[static_cast<int64_t>(t) * p.top_k + j] =
        p.replica_slots ? p.replica_slots[expert * p.max_replicas + t % p.replica_counts[expert]] : expert;
    p.weights[static_cast<int64_t>(t) * p.top_k + j] = w * p.routed_scaling;
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
  route_experts_kernel<<<blocks, kWarpsPerBlock * 32, shared_bytes, stream>>>(p);
}

}  // namespace tern::kernels
