#pragma once
// Mixture-of-experts router top-k: one warp per token turns its router logits into top_k (expert, weight) pairs.
#include <cuda_runtime.h>

#include <cstdint>

namespace tern::kernels {

enum class RouterScoringKind : int { softmax = 0, sigmoid = 1, sqrt_softplus = 2 };

// The largest expert count and top_k the kernel takes (a warp's lanes hold 32 experts each).
constexpr int kRouterMaxExperts = 1024;
constexpr int kRouterMaxTopK = 32;

struct RouterKernelParams {
  const float* logits = nullptr;  // [num_tokens, num_experts]
  int num_tokens = 0;
  int num_experts = 0;
  int top_k = 1;
  RouterScoringKind scoring = RouterScoringKind::softmax;
  bool normalize = false;
  float routed_scaling = 1.0f;
  // Group-limited choice: the best top_k_groups of num_groups groups (scored by their two best experts) compete.
  int num_groups = 1;
  int top_k_groups = 1;
  const float* selection_bias = nullptr;        // [num_experts], added for choosing only; may be null
  const int32_t* token_expert_table = nullptr;  // [vocab, top_k]: hash routing by token id; may be null
  const int32_t* token_ids = nullptr;           // [num_tokens], with token_expert_table
  // Expert-parallel load balancing (backend/expert_routing.h ExpertLoadBalancing), each part may be null:
  uint32_t* load_counts = nullptr;        // [num_experts]: += 1 per (token, chosen expert), wrapping
  const int32_t* replica_slots = nullptr;  // [num_experts, max_replicas]: the ids written are these slots
  const int32_t* replica_counts = nullptr;  // [num_experts]: a token in row t takes replica t % count
  int max_replicas = 0;
  int32_t* expert_ids = nullptr;                // [num_tokens, top_k]
  float* weights = nullptr;                     // [num_tokens, top_k]
};

// Throws std::invalid_argument for counts outside the kernel's limits.
void launch_route_experts(const RouterKernelParams& params, cudaStream_t stream);

}  // namespace tern::kernels
