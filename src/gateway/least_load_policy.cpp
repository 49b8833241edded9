#include "gateway/least_load_policy.h"

namespace tern::gateway {

size_t least_loaded(std::span<const ReplicaLoad> candidates) {
  size_t best = 0;
  for (size_t i = 1; i < candidates.size(); ++i) {
    if (candidates[i].num_outstanding < candidates[best].num_outstanding) best = i;
  }
  return best;
}

RouteDecision LeastLoadPolicy::route(const RoutingRequest& request, std::span<const ReplicaLoad> candidates) {
  return {least_loaded(candidates), "least_load"};
}

}  // namespace tern::gateway
