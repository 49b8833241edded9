#pragma once
// The replicas the gateway forwards to, with their health and the requests outstanding on each, and the routing
// policy that chooses among them. Thread-safe: connections on every I/O thread acquire and release replicas, the
// health checker marks them, /admin/replicas adds and removes them at run time.
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "gateway/replica_address.h"
#include "gateway/routing_policy.h"

namespace tern::gateway {

struct ReplicaStatus {
  std::string url;
  bool healthy = false;
  int64_t num_outstanding = 0;
};

// A replica chosen for one attempt at a request; give it back with ReplicaPool::release.
struct ReplicaLease {
  ReplicaAddress address;
  std::string_view reason;  // the policy's label for the choice
};

class ReplicaPool {
 public:
  explicit ReplicaPool(std::unique_ptr<RoutingPolicy> policy);

  std::string_view policy_name() const { return policy_name_; }
  bool policy_needs_text() const { return policy_needs_text_; }

  // A new replica is unhealthy until a health check passes. Returns false if the URL is already in the pool.
  bool add(const ReplicaAddress& address);
  // Returns false if the URL is not in the pool. Requests outstanding on it finish; its release is then ignored.
  bool remove(const std::string& url);
  // Returns whether the health changed.
  bool set_healthy(const std::string& url, bool healthy);

  std::vector<ReplicaStatus> list() const;
  std::vector<ReplicaAddress> addresses() const;
  size_t num_healthy() const;

  // Asks the policy for a healthy replica not in `excluded` (those the request already failed on) and counts the
  // request as outstanding there; nullopt if there is none.
  std::optional<ReplicaLease> acquire(const RoutingRequest& request, std::span<const std::string> excluded);
  // Returns false if the replica has left the pool meanwhile.
  bool release(const std::string& url);

 private:
  struct Replica {
    ReplicaAddress address;
    bool healthy = false;
    int64_t num_outstanding = 0;
  };
  Replica* find(const std::string& url);

  mutable std::mutex mutex_;
  std::unique_ptr<RoutingPolicy> policy_;
  const std::string policy_name_;
  const bool policy_needs_text_;
  std::vector<Replica> replicas_;  // in the order added
};

}  // namespace tern::gateway
