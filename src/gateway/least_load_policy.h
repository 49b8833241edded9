#pragma once
// Each request to the candidate with the fewest outstanding requests (the first such one on ties).
#include "gateway/routing_policy.h"

namespace tern::gateway {

class LeastLoadPolicy : public RoutingPolicy {
 public:
  std::string_view name() const override { return "least_load"; }
  RouteDecision route(const RoutingRequest& request, std::span<const ReplicaLoad> candidates) override;
};

// Index of the candidate with the fewest outstanding requests; the first one on ties.
size_t least_loaded(std::span<const ReplicaLoad> candidates);

}  // namespace tern::gateway
