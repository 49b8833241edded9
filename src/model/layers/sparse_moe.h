#pragma once
// A sparse mixture-of-experts feed-forward block: router, routed experts and optional shared experts whose output
// is added (DeepSeek). Under tensor parallelism the experts are replicated on every rank, or split over the ranks
// with expert parallelism (each rank computes its experts for every token; an all-reduce sums the ranks' parts). Covers the checkpoint layouts of Mixtral (w1/w3/w2), Qwen-MoE and DeepSeek
// (gate_proj/up_proj/down_proj per expert) and gpt-oss (fused, interleaved gate/up with biases).
#include <optional>
#include <string>

#include "backend/backend.h"
#include "model/layers/decoder_block.h"
#include "model/layers/gated_mlp.h"
#include "model/layers/moe_router.h"
#include "model/weight_loader.h"

namespace tern {

enum class ExpertLayout {
  per_expert,      // <prefix>.experts.<e>.<names.gate|up|down>.weight
  gpt_oss_fused    // <prefix>.experts.gate_up_proj [E, H, 2I] (gate/up interleaved), down_proj [E, I, H], + biases
};

struct SparseMoeConfig {
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;  // per expert
  std::string router_name = "gate";
  MoeRouterConfig router;
  ExpertLayout layout = ExpertLayout::per_expert;
  MlpNames expert_names;
  GluActivation activation;
  int64_t shared_intermediate_size = 0;  // 0: no shared experts
  std::string shared_name = "shared_experts";
};

class SparseMoe final : public FeedForwardBlock {
 public:
  SparseMoe(WeightLoader& weights, const std::string& prefix, const SparseMoeConfig& config);
  // [T, hidden] -> [T, hidden]
  Tensor forward(Backend& backend, const Tensor& x, const StepContext& step) const override;

 private:
  std::optional<MoeRouter> router_;
  Tensor gate_up_;  // [E, 2I, H]
  Tensor down_;     // [E, H, I]
  std::optional<Tensor> gate_up_bias_;  // [E, 2I]
  std::optional<Tensor> down_bias_;     // [E, H]
  GluActivation activation_;
  bool expert_parallel_ = false;  // this rank holds experts [first_expert_, + E) of them (Backend::expert_parallel)
  int64_t first_expert_ = 0;
  std::optional<GatedMlp> shared_experts_;
};

}  // namespace tern
