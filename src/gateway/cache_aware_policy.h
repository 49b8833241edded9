#pragma once
// SGLang's cache-aware routing: keep an approximate radix tree of the texts sent to each replica; while load is
// balanced, send a request to the replica whose tree matches the longest prefix of it if the match covers more
// than cache_threshold of the text, else to the least loaded replica (ties: the smallest tree, the one with the
// most room); when load is imbalanced, to the least loaded. The request's text then goes into the chosen tree.
#include <memory>
#include <unordered_map>

#include "gateway/prefix_tree.h"
#include "gateway/routing_policy.h"

namespace tern::gateway {

class CacheAwarePolicy : public RoutingPolicy {
 public:
  explicit CacheAwarePolicy(CacheAwareConfig config);

  std::string_view name() const override { return "cache_aware"; }
  bool needs_text() const override { return true; }
  RouteDecision route(const RoutingRequest& request, std::span<const ReplicaLoad> candidates) override;
  void forget(const std::string& url) override;

  // Bytes held in the replica's tree (0 for a replica never routed to); for tests and /admin/replicas.
  size_t tree_chars(const std::string& url) const;

 private:
  PrefixTree& tree_of(const std::string& url);
  bool imbalanced(std::span<const ReplicaLoad> candidates) const;
  size_t least_loaded_then_smallest_tree(std::span<const ReplicaLoad> candidates);

  CacheAwareConfig config_;
  std::unordered_map<std::string, std::unique_ptr<PrefixTree>> trees_;
};

}  // namespace tern::gateway
