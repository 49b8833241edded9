#pragma once
// Where one MoE layer's experts live under expert parallelism with redundant experts (EPLB): the layer has
// num_ranks * slots_per_rank physical expert slots, rank r holding slots [r * slots_per_rank, (r + 1) *
// slots_per_rank); each slot holds the weights of one logical expert and every logical expert has at least one slot.
// Slots holding the same expert are its replicas, which share its tokens.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace tern {

struct ExpertPlacement {
  int64_t num_experts = 0;
  int num_ranks = 1;
  std::vector<int32_t> slot_experts;  // [num_slots]: the logical expert each physical slot holds

  int64_t num_slots() const { return static_cast<int64_t>(slot_experts.size()); }
  int64_t slots_per_rank() const { return num_slots() / num_ranks; }
  // The slots of each logical expert, in increasing order: [num_experts][its replicas].
  std::vector<std::vector<int32_t>> expert_slots() const;
  bool operator==(const ExpertPlacement&) const = default;
};

// Fails naming `where` unless num_slots (the experts plus the redundant slots) splits evenly over num_ranks and
// leaves every expert a slot.
void check_expert_slots(int64_t num_experts, int64_t num_slots, int num_ranks, const std::string& where);

// The placement before any load is known: slot s holds expert s % num_experts (without redundant slots, rank r
// holds the r-th contiguous share of the experts).
ExpertPlacement initial_expert_placement(int64_t num_experts, int64_t num_slots, int num_ranks);

// A placement balancing the ranks for measured loads (tokens routed to each logical expert), as DeepSeek's EPLB
// does within one node: the redundant slots go one at a time to the expert with the most load per replica, then
// the replicas, heaviest first, each go to the least-loaded rank with a free slot, preferring ranks that do not
// hold that expert yet. A replica's load is its expert's load divided by the expert's replicas (tokens are spread
// evenly over them). Deterministic: ties go to the lower expert and the lower rank.
ExpertPlacement balanced_expert_placement(std::span<const int64_t> loads, int64_t num_slots, int num_ranks);

}  // namespace tern
