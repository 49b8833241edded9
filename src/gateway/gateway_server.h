#pragma once
// `tern gateway`: an OpenAI-compatible HTTP front over tern replicas. One acceptor and a few I/O threads run
// every client connection and every replica connection asynchronously (Boost.Asio/Beast): no thread per
// connection, and a stream costs the gateway a 64 KiB buffer, not a thread. Replica connections are kept alive
// and reused (upstream_connection_pool.h).
// Shutdown drains like `tern serve`: the first SIGINT or SIGTERM stops accepting and closes idle client
// connections; requests in flight (streams included) finish, and a request that still arrives on a kept-alive
// connection gets 503 and "Connection: close"; past the drain timeout, or on a second signal, every connection is
// closed (cancelling generations still running on the replicas).
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "gateway/gateway_api.h"
#include "gateway/gateway_metrics.h"
#include "gateway/health_checker.h"
#include "gateway/prefill_router.h"
#include "gateway/replica_admission.h"
#include "gateway/replica_pool.h"
#include "gateway/routing_policy.h"
#include "gateway/upstream_connection_pool.h"
#include "gateway/upstream_exchange.h"
#include "server/connection_drain.h"

namespace tern::gateway {

struct GatewayConfig {
  std::string host = "127.0.0.1";
  uint16_t port = 8080;  // 0: any free port (printed in the "listening on" line)
  int num_io_threads = 2;
  std::vector<std::string> replica_urls;
  std::string policy = "cache_aware";
  CacheAwareConfig cache_aware;
  // Enables /admin/replicas, which then needs "Authorization: Bearer <key>" (gateway_api.h); /v1/ requests carry
  // their own keys to the replicas.
  std::optional<std::string> admin_api_key;
  bool metrics_without_auth = false;  // /metrics open to anyone instead of behind the admin key
  std::vector<std::string> allowed_replica_hosts;  // what /admin/replicas may add (replica_admission.h); empty: any
  std::chrono::milliseconds health_interval{1'000};
  std::chrono::milliseconds health_timeout{2'000};
  UpstreamTimeouts upstream;
  std::chrono::milliseconds header_timeout{30'000};  // a client must send a request (head and body) within this
  uint64_t max_body_bytes = 32ull << 20;
  // Prefill/decode mode (see prefill_router.h) when prefill_urls is given: replica_urls are the decode replicas.
  std::vector<std::string> prefill_urls;
  std::vector<std::pair<std::string, std::string>> decode_kv_endpoints;  // decode URL -> KV endpoint host:port
  // The prefill hop's whole answer (prefill and KV transfer); past it the decode replica prefills itself.
  std::chrono::milliseconds prefill_timeout{30'000};
  UpstreamPoolLimits upstream_pool;
  std::chrono::milliseconds drain_timeout{30'000};  // in-flight requests still running after this are cut
};

class GatewaySession;

class GatewayServer {
 public:
  // Validates the configuration and binds (throws tern::Error naming what was wrong); serves nothing until run().
  explicit GatewayServer(GatewayConfig config);
  ~GatewayServer();

  uint16_t port() const { return port_; }
  // Serves until SIGINT or SIGTERM, then drains (see above) and returns.
  void run();

  // For connections.
  const GatewayConfig& config() const { return config_; }
  const std::string& id() const { return id_; }
  ReplicaPool& pool() { return pool_; }
  GatewayMetrics& metrics() { return metrics_; }
  GatewayApi& api() { return api_; }
  PrefillRouter* prefill_router() { return prefill_router_ ? &*prefill_router_ : nullptr; }
  UpstreamConnectionPool& upstream_connections() { return upstream_connections_; }
  server::ConnectionDrain<GatewaySession>& connections() { return connections_; }

 private:
  void accept();
  void wait_for_signal();
  void close_expired_upstream_connections();

  GatewayConfig config_;
  const std::string id_;  // kGatewayIdField's value (upstream_exchange.h)
  ReplicaPool pool_;
  ReplicaAdmission admission_;
  std::optional<PrefillRouter> prefill_router_;
  GatewayMetrics metrics_;

  // Declared before io_: sessions that die with io_'s pending handlers still unregister here.
  server::ConnectionDrain<GatewaySession> connections_;

  boost::asio::io_context io_;
  UpstreamConnectionPool upstream_connections_;  // after io_: its sockets close before io_ goes
  boost::asio::steady_timer upstream_sweep_timer_;
  HealthChecker health_;
  GatewayApi api_;
  boost::asio::ip::tcp::acceptor acceptor_;
  boost::asio::signal_set signals_;
  uint16_t port_ = 0;
};

}  // namespace tern::gateway
