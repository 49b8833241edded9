#pragma once
// Mixture-of-experts data passed between the model's router and the backend's expert kernels: how a router turns
// logits into (expert, weight) pairs per token, which experts each token uses, and the stacked expert weights.
#include <cstdint>

#include "backend/tensor.h"

namespace tern {

enum class RouterScoring {
  softmax,       // Mixtral, Qwen3-MoE, gpt-oss
  sigmoid,       // DeepSeek-V3
  sqrt_softplus  // DeepSeek-V4: sqrt(softplus(logit))
};

// Expert-parallel load balancing (EPLB), both parts optional. Replica choice is by the token's row t in the
// logits, so that exactly one physical slot (one rank) computes each (token, expert) pair and every rank, running
// the same router, picks the same one.
struct ExpertLoadBalancing {
  // [E] int32 counters in backend memory: route_experts adds 1 to element e for every (token of the step, chosen
  // logical expert e) of the call, as a wrapping 32-bit add. Never reset by the op: readers take differences. A
  // backend that records decode steps padded to a batch-size bucket counts the padding rows too (CUDA): the
  // recording cannot tell them apart, and they shift the loads by at most a bucket's rounding.
  Tensor* load_counts = nullptr;
  // Both or neither. With them route_experts returns physical slot ids: a token t choosing logical expert e gets
  // replica_slots[e, t % replica_counts[e]].
  const Tensor* replica_slots = nullptr;   // [E, max_replicas] int32; entries past replica_counts[e] are -1
  const Tensor* replica_counts = nullptr;  // [E] int32, each in [1, max_replicas]
};

struct RouterParams {
  RouterScoring scoring = RouterScoring::softmax;
  int64_t top_k = 1;
  // Selected weights are divided by their sum (norm_topk_prob); softmax over only the selected logits (gpt-oss)
  // is the same thing.
  bool normalize = false;
  float routed_scaling = 1.0f;  // multiplies the final weights (DeepSeek's routed_scaling_factor)
  // Group-limited selection (DeepSeek-V3): experts form num_groups equal groups, each group is scored by the sum of
  // its two best scores, and experts are picked only from the best top_k_groups groups.
  int64_t num_groups = 1;
  int64_t top_k_groups = 1;
  const Tensor* selection_bias = nullptr;  // [E] float: added to scores for choosing only (e_score_correction_bias)
  // [vocab, top_k] int32: hash routing (DeepSeek-V4), the experts come from the token id, not from the scores.
  const Tensor* token_expert_table = nullptr;
  ExpertLoadBalancing balancing;
};

struct ExpertRouting {
  Tensor expert_ids;  // [T, top_k] int32: logical experts, or physical slots under RouterParams::balancing
  Tensor weights;     // [T, top_k] float32
};

// The gated activation between an expert's gate/up projection and its down projection.
struct GluActivation {
  enum class Kind {
    silu,     // silu(gate) * up
    gpt_oss   // (up + 1) * gate * sigmoid(alpha * gate)
  };
  Kind kind = Kind::silu;
  float limit = 0.0f;  // > 0: gate clamped to (-inf, limit], up to [-limit, limit] before the activation
  float alpha = 1.702f;
};

// E experts of intermediate size I over hidden size H, stacked along dimension 0: experts [first_expert,
// first_expert + E) of the model (all of them but under expert parallelism; physical slots, as routed, under
// ExpertLoadBalancing). Routed ids outside that range belong to other ranks and add nothing here.
struct ExpertWeights {
  Tensor gate_up;                      // [E, 2I, H]: per expert, rows [0, I) gate and [I, 2I) up
  Tensor down;                         // [E, H, I]
  const Tensor* gate_up_bias = nullptr;  // [E, 2I]
  const Tensor* down_bias = nullptr;     // [E, H]
  int64_t first_expert = 0;
};

// The sizes of a moe_experts call, checked: the experts' weights against x's hidden size, the routing (int32 ids,
// float32 weights) against x's tokens. Fails naming what does not fit.
struct MoeShape {
  int64_t num_experts = 0;  // held here (this rank's share)
  int64_t hidden = 0;
  int64_t intermediate = 0;
  int64_t num_tokens = 0;
  int64_t top_k = 0;
};
MoeShape moe_shape(const Tensor& x, const ExpertRouting& routing, const ExpertWeights& experts);

}  // namespace tern
