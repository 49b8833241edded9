#pragma once
// How the gateway picks a replica for a request. The replica pool calls a policy under its lock with the healthy
// candidates that the request has not yet failed on, and the policy answers with one of them and the reason it
// was chosen (counted in /metrics). A policy keeps whatever state it needs (a cursor, prefix trees) per replica URL.
//
// The seam for prefill/decode disaggregation: a P/D router runs two pools (prefill and decode replicas), each
// with a policy of its own, and sends the request to the prefill choice, then the decode choice; the pool's
// acquire/release and this interface carry over unchanged, only the forwarding becomes two hops.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

namespace tern::gateway {

struct ReplicaLoad {
  const std::string* url;  // the replica's normalized URL (owned by the pool, valid during the call)
  int64_t num_outstanding = 0;  // requests the gateway has sent it that have not finished
};

// What a policy may look at in a request: the text that a cache-aware policy matches (see routing_text.h);
// empty for requests without a prompt (e.g. GET /v1/models) or when the policy does not need it.
struct RoutingRequest {
  std::string_view text;
};

struct RouteDecision {
  size_t candidate = 0;     // index into the candidates given
  std::string_view reason;  // a static label, e.g. "cache_hit", "load_imbalance", "round_robin"
};

class RoutingPolicy {
 public:
  virtual ~RoutingPolicy() = default;
  virtual std::string_view name() const = 0;
  // Whether route() reads RoutingRequest::text (the gateway parses request bodies only for policies that do).
  virtual bool needs_text() const { return false; }
  // `candidates` is never empty. The choice is taken: a policy that learns from it (the cache-aware one inserts
  // the text into the chosen replica's tree) does so here.
  virtual RouteDecision route(const RoutingRequest& request, std::span<const ReplicaLoad> candidates) = 0;
  // The replica was removed from the pool: drop what is kept for it.
  virtual void forget(const std::string& url) {}
};

struct CacheAwareConfig {
  // Route to the replica with the longest match when matched bytes / request bytes exceeds this.
  double cache_threshold = 0.5;
  // Load counts as imbalanced (route to the least loaded, ignoring caches) when max - min outstanding exceeds
  // balance_abs_threshold AND max exceeds min * balance_rel_threshold (SGLang's router's two thresholds).
  int64_t balance_abs_threshold = 32;
  double balance_rel_threshold = 1.5;
  size_t max_tree_chars = size_t{1} << 24;  // per replica; LRU eviction beyond it
};

// "cache_aware", "round_robin" or "least_load"; throws tern::Error naming the policy otherwise.
std::unique_ptr<RoutingPolicy> make_routing_policy(std::string_view name, const CacheAwareConfig& cache_aware);

}  // namespace tern::gateway
