#pragma once
// A sparse mixture-of-experts feed-forward block: router, routed experts and optional shared experts whose output
// is added (DeepSeek). Under tensor parallelism the experts are replicated on every rank, or split over the ranks
// with expert parallelism: the layer's experts plus its redundant slots are placed over the ranks (expert_placement.h),
// each rank computes its slots for the tokens routed to them and an all-reduce sums the ranks' parts (or, under
// data-parallel attention, where each rank holds other tokens, an all-to-all sends tokens to their experts' ranks
// and the outputs back); the router
// counts each expert's tokens so that a load balancer (EPLB) can place them again. Covers the checkpoint layouts of
// Mixtral (w1/w3/w2), Qwen-MoE and DeepSeek (gate_proj/up_proj/down_proj per expert) and gpt-oss (fused,
// interleaved gate/up with biases).
#include <optional>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "model/expert_placement.h"
#include "model/layers/decoder_block.h"
#include "model/layers/gated_mlp.h"
#include "model/layers/moe_router.h"
#include "model/model.h"
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
  Tensor forward(Backend& backend, const BlockInput& input, const StepContext& step) const override;
  // Under data parallelism, for a rank without tokens in this step: computes its experts for the other ranks'
  // tokens (forward's token exchange with nothing of its own to send), so that every rank meets every MoE layer's
  // all-to-alls.
  void serve_peers(Backend& backend) const;

  // Expert parallelism only (null otherwise): where the layer's experts are, the same on every rank.
  const ExpertPlacement* placement() const { return balancing_ ? &balancing_->placement : nullptr; }
  // Tokens routed to each logical expert since the last call or since loading (reads the counters the router adds
  // to in backend memory: a host sync).
  std::vector<int64_t> take_expert_load(Backend& backend);
  // Loads this rank's slots of `placement` from the checkpoint `weights` reads and routes by it from the next step
  // on; every rank of the group must be given the same placement.
  void place_experts(WeightLoader& weights, const ExpertPlacement& placement);

 private:
  ExpertWeights local_experts() const;
  // Data-parallel expert parallelism: sends each token (x [T, hidden] with its routing; null for none) to the ranks
  // holding its routed slots, computes this rank's experts for the tokens it receives, and returns each token's
  // routed output [T, hidden], summed over the ranks that computed it.
  Tensor exchange_tokens(Backend& backend, const Tensor* x, const ExpertRouting* routing) const;
  // The weights of the given logical experts, stacked in that order (repeats allowed), into gate_up_ .. down_bias_.
  void load_experts(WeightLoader& weights, const std::vector<int32_t>& experts);

  struct Balancing {
    ExpertPlacement placement;
    Tensor replica_slots;   // [E, max_replicas] int32 (ExpertLoadBalancing)
    Tensor replica_counts;  // [E] int32
    // [E] int32, added to by every forward's router; never reallocated, so recorded steps keep counting into it.
    mutable Tensor load_counts;
    std::vector<uint32_t> counted;  // load_counts as of the last take_expert_load
  };

  std::string prefix_;
  SparseMoeConfig config_;
  std::optional<MoeRouter> router_;
  Tensor gate_up_;  // [E, 2I, H] (E: this rank's slots under expert parallelism)
  Tensor down_;     // [E, H, I]
  std::optional<Tensor> gate_up_bias_;  // [E, 2I]
  std::optional<Tensor> down_bias_;     // [E, H]
  int64_t first_slot_ = 0;  // gate_up_ .. down_bias_ hold slots [first_slot_, + E) of the layer
  std::optional<Balancing> balancing_;  // under expert parallelism (Backend::expert_parallel)
  std::optional<GatedMlp> shared_experts_;
};

// A data-parallel rank's part in a forward step of the others when it has no tokens of its own: serve_peers in
// every MoE layer of `model`, in layer order, as the others' forwards meet them.
void serve_expert_peers(Model& model, Backend& backend);

}  // namespace tern
