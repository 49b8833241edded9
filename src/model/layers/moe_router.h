#pragma once
// The router of a sparse MoE block: a linear layer scoring every expert, then top-k selection (softmax, sigmoid
// with group-limited top-k and a selection bias, sqrt-softplus, or a token-id hash table).
#include <optional>
#include <string>

#include "backend/backend.h"
#include "model/weight_loader.h"

namespace tern {

struct MoeRouterConfig {
  int64_t hidden_size = 0;
  int64_t num_experts = 0;
  RouterParams params;         // its tensor pointers are filled in by the router from its own weights
  bool logit_bias = false;     // `<prefix>.bias` added to the logits (gpt-oss)
  std::string selection_bias_name;  // e.g. "e_score_correction_bias" (DeepSeek-V3) or "bias" (DeepSeek-V4); "" none
  bool hash_table = false;     // `<prefix>.tid2eid` [vocab, top_k] picks the experts (DeepSeek-V4 hash layers)
  int64_t vocab_size = 0;      // rows of the hash table
};

class MoeRouter {
 public:
  // Loads `<prefix>.weight` [num_experts, hidden] and the optional tensors the config names.
  MoeRouter(WeightLoader& weights, const std::string& prefix, const MoeRouterConfig& config);
  // x [T, hidden] -> the experts (or, with replica tables, the physical slots) and weights of every token.
  ExpertRouting route(Backend& backend, const Tensor& x, const StepContext& step,
                      const ExpertLoadBalancing& balancing = {}) const;

 private:
  MoeRouterConfig config_;
  Tensor weight_;  // [num_experts, hidden]
  std::optional<Tensor> logit_bias_;      // [num_experts]
  std::optional<Tensor> selection_bias_;  // [num_experts]
  std::optional<Tensor> hash_table_;      // [vocab, top_k] int32
};

}  // namespace tern
