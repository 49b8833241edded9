#pragma once
// The endpoints the gateway answers itself: GET /health (200 while a replica is healthy; says how many, not which),
// GET /metrics, and /admin/replicas (GET lists replicas with health and load; POST and DELETE {"url": ...} add and
// remove one; a removed replica's idle connections are closed). Everything under /v1/ is forwarded to replicas
// instead (is_forwarded).
// /admin/replicas decides where clients' requests and their API keys go, so it exists only with an admin key
// (403 without one) and then needs it as "Authorization: Bearer <key>"; added replicas must pass the admission
// rules (replica_admission.h). /metrics names the replicas' URLs: it needs the admin key too, unless
// metrics_without_auth opens it to anyone (without either it answers 403).
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "gateway/gateway_metrics.h"
#include "gateway/replica_admission.h"
#include "gateway/replica_pool.h"
#include "gateway/upstream_connection_pool.h"
#include "server/http_reply.h"

namespace tern::gateway {

class GatewayApi {
 public:
  using ReplicaAdded = std::function<void(const ReplicaAddress&)>;
  GatewayApi(ReplicaPool& pool, UpstreamConnectionPool& connections, GatewayMetrics& metrics,
             const ReplicaAdmission& admission, std::optional<std::string> admin_api_key, bool metrics_without_auth,
             ReplicaAdded on_replica_added);

  static bool is_forwarded(std::string_view path) { return path.starts_with("/v1/"); }

  // `authorization` is the request's Authorization header ("" if none). Never throws: errors become replies.
  server::HttpReply handle(std::string_view method, std::string_view path, std::string_view authorization,
                           std::string_view body);

 private:
  server::HttpReply admin_replicas(std::string_view method, std::string_view body);
  // Throws ApiError 403 without an admin key (the route is disabled), 401 unless `authorization` carries it.
  void require_admin_key(std::string_view path, std::string_view authorization) const;

  ReplicaPool& pool_;
  UpstreamConnectionPool& connections_;
  GatewayMetrics& metrics_;
  const ReplicaAdmission& admission_;
  std::optional<std::string> admin_api_key_;
  bool metrics_without_auth_;
  ReplicaAdded on_replica_added_;
};

}  // namespace tern::gateway
