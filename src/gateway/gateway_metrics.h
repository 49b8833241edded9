#pragma once
// The gateway's own Prometheus metrics (text format 0.0.4), "tern:gateway_" prefixed: requests sent to each
// replica, replica failures and retries, requests it could not serve, routing decisions by policy and reason, and
// the latency it adds (request received to request sent to a replica: parsing, routing, connecting, retrying).
// Per-replica gauges (health, outstanding) and the upstream connection counts are read from their owners when
// /metrics is scraped. Thread-safe.
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gateway/replica_pool.h"
#include "gateway/upstream_connection_pool.h"
#include "server/metrics.h"

namespace tern::gateway {

class GatewayMetrics {
 public:
  GatewayMetrics();

  void count_routed(const std::string& replica, std::string_view policy, std::string_view reason);
  // The replica failed the request before anything reached the client (connection refused or reset, a timeout,
  // or a 5xx); the gateway retries elsewhere.
  void count_replica_failure(const std::string& replica);
  void count_retry();
  // No replica could serve the request (none healthy, or all failed): the client got a 5xx from the gateway.
  void count_unserved();
  // The replica failed after the response had started reaching the client: the connection was closed.
  void count_broken_response();
  void count_response(int status);
  void observe_added_latency(double seconds);

  std::string render(const std::vector<ReplicaStatus>& replicas, const UpstreamPoolStats& connections) const;

 private:
  mutable std::mutex mutex_;
  std::map<std::string, int64_t> requests_by_replica_;
  std::map<std::string, int64_t> failures_by_replica_;
  std::map<std::pair<std::string, std::string>, int64_t> decisions_;  // (policy, reason)
  std::map<int, int64_t> responses_by_status_;
  int64_t retries_ = 0;
  int64_t unserved_ = 0;
  int64_t broken_responses_ = 0;
  server::Histogram added_latency_;
};

}  // namespace tern::gateway
