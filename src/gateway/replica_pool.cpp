#include "gateway/replica_pool.h"

#include <algorithm>

namespace tern::gateway {

ReplicaPool::ReplicaPool(std::unique_ptr<RoutingPolicy> policy)
    : policy_(std::move(policy)), policy_name_(policy_->name()), policy_needs_text_(policy_->needs_text()) {}

ReplicaPool::Replica* ReplicaPool::find(const std::string& url) {
  auto it = std::find_if(replicas_.begin(), replicas_.end(), [&](const Replica& r) { return r.address.url == url; });
  return it == replicas_.end() ? nullptr : &*it;
}

bool ReplicaPool::add(const ReplicaAddress& address) {
  std::lock_guard lock(mutex_);
  if (find(address.url)) return false;
  replicas_.push_back({address});
  return true;
}

bool ReplicaPool::remove(const std::string& url) {
  std::lock_guard lock(mutex_);
  auto it = std::find_if(replicas_.begin(), replicas_.end(), [&](const Replica& r) { return r.address.url == url; });
  if (it == replicas_.end()) return false;
  replicas_.erase(it);
  policy_->forget(url);
  return true;
}

bool ReplicaPool::set_healthy(const std::string& url, bool healthy) {
  std::lock_guard lock(mutex_);
  Replica* replica = find(url);
  if (!replica || replica->healthy == healthy) return false;
  replica->healthy = healthy;
  return true;
}

std::vector<ReplicaStatus> ReplicaPool::list() const {
  std::lock_guard lock(mutex_);
  std::vector<ReplicaStatus> out;
  for (const Replica& r : replicas_) out.push_back({r.address.url, r.healthy, r.num_outstanding});
  return out;
}

std::vector<ReplicaAddress> ReplicaPool::addresses() const {
  std::lock_guard lock(mutex_);
  std::vector<ReplicaAddress> out;
  for (const Replica& r : replicas_) out.push_back(r.address);
  return out;
}

size_t ReplicaPool::num_healthy() const {
  std::lock_guard lock(mutex_);
  return std::count_if(replicas_.begin(), replicas_.end(), [](const Replica& r) { return r.healthy; });
}

std::optional<ReplicaLease> ReplicaPool::acquire(const RoutingRequest& request, std::span<const std::string> excluded) {
  std::lock_guard lock(mutex_);
  std::vector<ReplicaLoad> candidates;
  std::vector<Replica*> candidate_replicas;
  for (Replica& r : replicas_) {
    if (!r.healthy || std::find(excluded.begin(), excluded.end(), r.address.url) != excluded.end()) continue;
    candidates.push_back({&r.address.url, r.num_outstanding});
    candidate_replicas.push_back(&r);
  }
  if (candidates.empty()) return std::nullopt;
  const RouteDecision decision = policy_->route(request, candidates);
  Replica* chosen = candidate_replicas.at(decision.candidate);
  ++chosen->num_outstanding;
  return ReplicaLease{chosen->address, decision.reason};
}

bool ReplicaPool::release(const std::string& url) {
  std::lock_guard lock(mutex_);
  Replica* replica = find(url);
  if (!replica) return false;
  --replica->num_outstanding;
  return true;
}

}  // namespace tern::gateway
