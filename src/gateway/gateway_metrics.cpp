#include "gateway/gateway_metrics.h"

#include <fmt/format.h>

namespace tern::gateway {

namespace {

void header(std::string& out, std::string_view name, std::string_view type, std::string_view help) {
  out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

}  // namespace

GatewayMetrics::GatewayMetrics()
    : added_latency_({0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5}) {}

void GatewayMetrics::count_routed(const std::string& replica, std::string_view policy, std::string_view reason) {
  std::lock_guard lock(mutex_);
  ++requests_by_replica_[replica];
  ++decisions_[{std::string(policy), std::string(reason)}];
}

void GatewayMetrics::count_replica_failure(const std::string& replica) {
  std::lock_guard lock(mutex_);
  ++failures_by_replica_[replica];
}

void GatewayMetrics::count_retry() {
  std::lock_guard lock(mutex_);
  ++retries_;
}

void GatewayMetrics::count_unserved() {
  std::lock_guard lock(mutex_);
  ++unserved_;
}

void GatewayMetrics::count_broken_response() {
  std::lock_guard lock(mutex_);
  ++broken_responses_;
}

void GatewayMetrics::count_response(int status) {
  std::lock_guard lock(mutex_);
  ++responses_by_status_[status];
}

void GatewayMetrics::observe_added_latency(double seconds) {
  std::lock_guard lock(mutex_);
  added_latency_.observe(seconds);
}

std::string GatewayMetrics::render(const std::vector<ReplicaStatus>& replicas,
                                   const UpstreamPoolStats& connections) const {
  std::lock_guard lock(mutex_);
  std::string out;
  header(out, "tern:gateway_requests_total", "counter", "Requests sent to each replica (retries included).");
  for (const auto& [replica, count] : requests_by_replica_) {
    out += fmt::format("tern:gateway_requests_total{{replica=\"{}\"}} {}\n", replica, count);
  }
  header(out, "tern:gateway_replica_failures_total", "counter",
         "Requests a replica failed before the response reached the client (then retried elsewhere).");
  for (const auto& [replica, count] : failures_by_replica_) {
    out += fmt::format("tern:gateway_replica_failures_total{{replica=\"{}\"}} {}\n", replica, count);
  }
  header(out, "tern:gateway_retries_total", "counter", "Requests sent again to another replica after a failure.");
  out += fmt::format("tern:gateway_retries_total {}\n", retries_);
  header(out, "tern:gateway_unserved_requests_total", "counter",
         "Requests no replica could serve (none healthy or all failed).");
  out += fmt::format("tern:gateway_unserved_requests_total {}\n", unserved_);
  header(out, "tern:gateway_broken_responses_total", "counter",
         "Responses cut off because the replica failed after they had started reaching the client.");
  out += fmt::format("tern:gateway_broken_responses_total {}\n", broken_responses_);
  header(out, "tern:gateway_routing_decisions_total", "counter", "Routing decisions by policy and reason.");
  for (const auto& [key, count] : decisions_) {
    out += fmt::format("tern:gateway_routing_decisions_total{{policy=\"{}\",reason=\"{}\"}} {}\n", key.first,
                       key.second, count);
  }
  header(out, "tern:gateway_http_responses_total", "counter", "HTTP responses to clients by status code.");
  for (const auto& [status, count] : responses_by_status_) {
    out += fmt::format("tern:gateway_http_responses_total{{status=\"{}\"}} {}\n", status, count);
  }
  header(out, "tern:gateway_replica_healthy", "gauge", "1 if the replica passes health checks.");
  for (const ReplicaStatus& r : replicas) {
    out += fmt::format("tern:gateway_replica_healthy{{replica=\"{}\"}} {}\n", r.url, r.healthy ? 1 : 0);
  }
  header(out, "tern:gateway_outstanding_requests", "gauge", "Requests in flight on each replica.");
  for (const ReplicaStatus& r : replicas) {
    out += fmt::format("tern:gateway_outstanding_requests{{replica=\"{}\"}} {}\n", r.url, r.num_outstanding);
  }
  header(out, "tern:gateway_upstream_connections_opened_total", "counter",
         "Connections opened to replicas for requests (health checks not included).");
  out += fmt::format("tern:gateway_upstream_connections_opened_total {}\n", connections.connections_opened);
  header(out, "tern:gateway_upstream_connections_reused_total", "counter",
         "Requests sent on an idle keep-alive connection to a replica instead of a new one.");
  out += fmt::format("tern:gateway_upstream_connections_reused_total {}\n", connections.connections_reused);
  header(out, "tern:gateway_upstream_stale_connection_retries_total", "counter",
         "Requests sent again on a new connection because the replica had closed the idle one they were sent on.");
  out += fmt::format("tern:gateway_upstream_stale_connection_retries_total {}\n",
                     connections.stale_connection_retries);
  header(out, "tern:gateway_upstream_idle_connections", "gauge", "Idle keep-alive connections to replicas.");
  out += fmt::format("tern:gateway_upstream_idle_connections {}\n", connections.idle_connections);
  out += added_latency_.render("tern:gateway_added_latency_seconds",
                               "Time from receiving a request to having sent it to a replica.");
  return out;
}

}  // namespace tern::gateway
