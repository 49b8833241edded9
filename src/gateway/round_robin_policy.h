#pragma once
// Each request to the next candidate in turn, whatever their load or caches.
#include "gateway/routing_policy.h"

namespace tern::gateway {

class RoundRobinPolicy : public RoutingPolicy {
 public:
  std::string_view name() const override { return "round_robin"; }
  RouteDecision route(const RoutingRequest& request, std::span<const ReplicaLoad> candidates) override;

 private:
  uint64_t next_ = 0;
};

}  // namespace tern::gateway
