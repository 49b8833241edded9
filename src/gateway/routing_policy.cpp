#include "gateway/routing_policy.h"

#include "core/error.h"
#include "gateway/cache_aware_policy.h"
#include "gateway/least_load_policy.h"
#include "gateway/round_robin_policy.h"

namespace tern::gateway {

std::unique_ptr<RoutingPolicy> make_routing_policy(std::string_view name, const CacheAwareConfig& cache_aware) {
  if (name == "cache_aware") return std::make_unique<CacheAwarePolicy>(cache_aware);
  if (name == "round_robin") return std::make_unique<RoundRobinPolicy>();
  if (name == "least_load") return std::make_unique<LeastLoadPolicy>();
  fail("routing policy '{}': expected cache_aware, round_robin or least_load", name);
}

}  // namespace tern::gateway
