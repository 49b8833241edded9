#pragma once
// The endpoints the gateway answers itself: GET /health (200 while a replica is healthy), GET /metrics, and
// /admin/replicas (GET lists replicas with health and load; POST and DELETE {"url": ...} add and remove one,
// behind the API key when one is set; a removed replica's idle connections are closed). Everything under /v1/ is
// forwarded to replicas instead (is_forwarded).
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "gateway/gateway_metrics.h"
#include "gateway/replica_pool.h"
#include "gateway/upstream_connection_pool.h"
#include "server/http_reply.h"

namespace tern::gateway {

class GatewayApi {
 public:
  using ReplicaAdded = std::function<void(const ReplicaAddress&)>;
  GatewayApi(ReplicaPool& pool, UpstreamConnectionPool& connections, GatewayMetrics& metrics,
             std::optional<std::string> api_key, ReplicaAdded on_replica_added);

  static bool is_forwarded(std::string_view path) { return path.starts_with("/v1/"); }

  // `authorization` is the request's Authorization header ("" if none). Never throws: errors become replies.
  server::HttpReply handle(std::string_view method, std::string_view path, std::string_view authorization,
                           std::string_view body);

 private:
  server::HttpReply admin_replicas(std::string_view method, std::string_view body);

  ReplicaPool& pool_;
  UpstreamConnectionPool& connections_;
  GatewayMetrics& metrics_;
  std::optional<std::string> api_key_;
  ReplicaAdded on_replica_added_;
};

}  // namespace tern::gateway
