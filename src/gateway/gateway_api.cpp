#include "gateway/gateway_api.h"

#include "core/error.h"
#include "core/ordered_json_parser.h"
#include "server/api_error.h"
#include "server/bearer_auth.h"

namespace tern::gateway {

using server::ApiError;
using server::HttpReply;
using Json = nlohmann::ordered_json;

GatewayApi::GatewayApi(ReplicaPool& pool, UpstreamConnectionPool& connections, GatewayMetrics& metrics,
                       const ReplicaAdmission& admission, std::optional<std::string> admin_api_key,
                       bool metrics_without_auth, ReplicaAdded on_replica_added)
    : pool_(pool),
      connections_(connections),
      metrics_(metrics),
      admission_(admission),
      admin_api_key_(std::move(admin_api_key)),
      metrics_without_auth_(metrics_without_auth),
      on_replica_added_(std::move(on_replica_added)) {}

HttpReply GatewayApi::handle(std::string_view method, std::string_view path, std::string_view authorization,
                             std::string_view body) {
  try {
    auto expect_method = [&](std::initializer_list<std::string_view> allowed) {
      for (std::string_view m : allowed) {
        if (method == m) return;
      }
      throw ApiError(405, fmt::format("method {} is not allowed on {}", method, path));
    };
    if (path == "/health") {
      expect_method({"GET"});
      const size_t num_healthy = pool_.num_healthy();
      if (num_healthy == 0) throw ApiError(503, "no healthy replica");
      return HttpReply::json(Json{{"status", "ok"}, {"healthy_replicas", num_healthy}});
    }
    if (path == "/metrics") {
      expect_method({"GET"});
      if (!metrics_without_auth_) require_admin_key(path, authorization);
      return {200, "text/plain; version=0.0.4; charset=utf-8", metrics_.render(pool_.list(), connections_.stats())};
    }
    if (path == "/admin/replicas") {
      expect_method({"GET", "POST", "DELETE"});
      require_admin_key(path, authorization);
      return admin_replicas(method, body);
    }
    throw ApiError(404, fmt::format("no route for {} {}", method, path));
  } catch (const ApiError& error) {
    return HttpReply::error(error);
  }
}

void GatewayApi::require_admin_key(std::string_view path, std::string_view authorization) const {
  if (!admin_api_key_) {
    const std::string_view enable = path == "/metrics" ? "--admin-api-key (then send it), or --metrics-without-auth"
                                                       : "--admin-api-key (or $TERN_GATEWAY_ADMIN_API_KEY)";
    throw ApiError(403, fmt::format("{} is disabled on this gateway: it has no admin API key; start it with {} to "
                                    "enable it", path, enable),
                   std::nullopt, "admin_api_disabled");
  }
  server::require_bearer_key(authorization, *admin_api_key_);
}

HttpReply GatewayApi::admin_replicas(std::string_view method, std::string_view body) {
  if (method == "GET") {
    Json replicas = Json::array();
    for (const ReplicaStatus& r : pool_.list()) {
      replicas.push_back({{"url", r.url}, {"healthy", r.healthy}, {"outstanding", r.num_outstanding}});
    }
    return HttpReply::json(Json{{"policy", pool_.policy_name()}, {"replicas", replicas}});
  }
  const Json request = parse_ordered_json(body, /*allow_exceptions=*/false);
  if (!request.is_object() || !request.contains("url") || !request["url"].is_string()) {
    throw ApiError(400, "expected a JSON body {\"url\": \"http://host:port\"}", "url");
  }
  ReplicaAddress address;
  try {
    address = parse_replica_url(request["url"].get<std::string>());
  } catch (const Error& error) {
    throw ApiError(400, error.what(), "url");
  }
  if (method == "POST") {
    try {
      admission_.check(address, ReplicaOrigin::kAdminApi);
    } catch (const Error& error) {
      throw ApiError(403, error.what(), "url", "replica_not_allowed");
    }
    if (!pool_.add(address)) throw ApiError(409, fmt::format("replica {} is already in the pool", address.url), "url");
    on_replica_added_(address);
    return HttpReply::json(Json{{"added", address.url}}, 201);
  }
  if (!pool_.remove(address.url)) throw ApiError(404, fmt::format("replica {} is not in the pool", address.url), "url");
  connections_.close_all(address.url);
  return HttpReply::json(Json{{"removed", address.url}});
}

}  // namespace tern::gateway
