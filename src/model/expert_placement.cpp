#include "model/expert_placement.h"

#include <algorithm>

#include "core/error.h"

namespace tern {

std::vector<std::vector<int32_t>> ExpertPlacement::expert_slots() const {
  std::vector<std::vector<int32_t>> slots(static_cast<size_t>(num_experts));
  for (int64_t s = 0; s < num_slots(); ++s) {
    slots.at(static_cast<size_t>(slot_experts[s])).push_back(static_cast<int32_t>(s));
  }
  return slots;
}

void check_expert_slots(int64_t num_experts, int64_t num_slots, int num_ranks, const std::string& where) {
  if (num_ranks < 1 || num_slots < num_experts || num_slots % num_ranks != 0) {
    fail("{}: {} experts + {} redundant (--num-redundant-experts) = {} expert slots do not split evenly over {} "
         "expert-parallel ranks",
         where, num_experts, num_slots - num_experts, num_slots, num_ranks);
  }
}

ExpertPlacement initial_expert_placement(int64_t num_experts, int64_t num_slots, int num_ranks) {
  check_expert_slots(num_experts, num_slots, num_ranks, "expert placement");
  ExpertPlacement placement{num_experts, num_ranks, std::vector<int32_t>(static_cast<size_t>(num_slots))};
  for (int64_t s = 0; s < num_slots; ++s) placement.slot_experts[s] = static_cast<int32_t>(s % num_experts);
  return placement;
}

ExpertPlacement balanced_expert_placement(std::span<const int64_t> loads, int64_t num_slots, int num_ranks) {
  const auto num_experts = static_cast<int64_t>(loads.size());
  check_expert_slots(num_experts, num_slots, num_ranks, "expert placement");
  // Replication: each redundant slot to the expert whose replicas carry the most load each.
  std::vector<int64_t> replicas(static_cast<size_t>(num_experts), 1);
  auto load_per_replica = [&](int64_t e) { return static_cast<double>(loads[e]) / static_cast<double>(replicas[e]); };
  for (int64_t extra = num_experts; extra < num_slots; ++extra) {
    int64_t hottest = 0;
    for (int64_t e = 1; e < num_experts; ++e) {
      if (load_per_replica(e) > load_per_replica(hottest)) hottest = e;
    }
    ++replicas[hottest];
  }
  // Packing: replicas heaviest first, each to the least-loaded rank that has room.
  struct Replica {
    int32_t expert;
    double load;
  };
  std::vector<Replica> items;
  for (int64_t e = 0; e < num_experts; ++e) {
    for (int64_t i = 0; i < replicas[e]; ++i) items.push_back({static_cast<int32_t>(e), load_per_replica(e)});
  }
  std::stable_sort(items.begin(), items.end(), [](const Replica& a, const Replica& b) { return a.load > b.load; });
  const int64_t slots_per_rank = num_slots / num_ranks;
  std::vector<double> rank_load(static_cast<size_t>(num_ranks), 0.0);
  std::vector<std::vector<int32_t>> rank_experts(static_cast<size_t>(num_ranks));
  for (const Replica& item : items) {
    int best = -1;
    bool best_holds = true;
    for (int r = 0; r < num_ranks; ++r) {
      const auto& held = rank_experts[r];
      if (static_cast<int64_t>(held.size()) == slots_per_rank) continue;
      const bool holds = std::find(held.begin(), held.end(), item.expert) != held.end();
      if (best < 0 || (best_holds && !holds) || (holds == best_holds && rank_load[r] < rank_load[best])) {
        best = r;
        best_holds = holds;
      }
    }
    rank_experts[best].push_back(item.expert);
    rank_load[best] += item.load;
  }
  ExpertPlacement placement{num_experts, num_ranks, {}};
  for (auto& held : rank_experts) {
    std::sort(held.begin(), held.end());
    placement.slot_experts.insert(placement.slot_experts.end(), held.begin(), held.end());
  }
  return placement;
}

}  // namespace tern
