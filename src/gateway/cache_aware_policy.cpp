#include "gateway/cache_aware_policy.h"

#include <algorithm>

namespace tern::gateway {

CacheAwarePolicy::CacheAwarePolicy(CacheAwareConfig config) : config_(config) {}

PrefixTree& CacheAwarePolicy::tree_of(const std::string& url) {
  auto& tree = trees_[url];
  if (!tree) tree = std::make_unique<PrefixTree>(config_.max_tree_chars);
  return *tree;
}

size_t CacheAwarePolicy::tree_chars(const std::string& url) const {
  auto it = trees_.find(url);
  return it == trees_.end() ? 0 : it->second->num_chars();
}

void CacheAwarePolicy::forget(const std::string& url) { trees_.erase(url); }

bool CacheAwarePolicy::imbalanced(std::span<const ReplicaLoad> candidates) const {
  auto [min_it, max_it] = std::minmax_element(
      candidates.begin(), candidates.end(),
      [](const ReplicaLoad& a, const ReplicaLoad& b) { return a.num_outstanding < b.num_outstanding; });
  const auto min_load = static_cast<double>(min_it->num_outstanding);
  const auto max_load = static_cast<double>(max_it->num_outstanding);
  return max_load - min_load > static_cast<double>(config_.balance_abs_threshold) &&
         max_load > min_load * config_.balance_rel_threshold;
}

size_t CacheAwarePolicy::least_loaded_then_smallest_tree(std::span<const ReplicaLoad> candidates) {
  size_t best = 0;
  for (size_t i = 1; i < candidates.size(); ++i) {
    const auto& a = candidates[i];
    const auto& b = candidates[best];
    if (a.num_outstanding < b.num_outstanding ||
        (a.num_outstanding == b.num_outstanding && tree_chars(*a.url) < tree_chars(*b.url))) {
      best = i;
    }
  }
  return best;
}

RouteDecision CacheAwarePolicy::route(const RoutingRequest& request, std::span<const ReplicaLoad> candidates) {
  RouteDecision decision;
  if (imbalanced(candidates)) {
    decision = {least_loaded_then_smallest_tree(candidates), "load_imbalance"};
  } else {
    size_t best = 0;
    size_t best_match = 0;
    for (size_t i = 0; i < candidates.size(); ++i) {
      const size_t match = tree_of(*candidates[i].url).match(request.text);
      if (match > best_match ||
          (match == best_match && candidates[i].num_outstanding < candidates[best].num_outstanding)) {
        best = i;
        best_match = match;
      }
    }
    const double ratio = request.text.empty() ? 0.0 : static_cast<double>(best_match) / request.text.size();
    if (ratio > config_.cache_threshold) {
      decision = {best, "cache_hit"};
    } else {
      decision = {least_loaded_then_smallest_tree(candidates), "cache_miss"};
    }
  }
  if (!request.text.empty()) tree_of(*candidates[decision.candidate].url).insert(request.text);
  return decision;
}

}  // namespace tern::gateway
