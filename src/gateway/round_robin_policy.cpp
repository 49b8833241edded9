#include "gateway/round_robin_policy.h"

namespace tern::gateway {

RouteDecision RoundRobinPolicy::route(const RoutingRequest& request, std::span<const ReplicaLoad> candidates) {
  return {static_cast<size_t>(next_++ % candidates.size()), "round_robin"};
}

}  // namespace tern::gateway
