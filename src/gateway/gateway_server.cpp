#include "gateway/gateway_server.h"

#include <boost/asio/strand.hpp>
#include <csignal>
#include <cstdio>

#include "core/error.h"
#include "gateway/gateway_session.h"
#include "server/openai_api.h"

namespace tern::gateway {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

namespace {

constexpr auto kUpstreamSweepInterval = std::chrono::seconds(1);

}  // namespace

GatewayServer::GatewayServer(GatewayConfig config)
    : config_(std::move(config)),
      id_(server::random_hex_id()),
      pool_(make_routing_policy(config_.policy, config_.cache_aware)),
      admission_(config_.allowed_replica_hosts),
      upstream_connections_(config_.upstream_pool),
      upstream_sweep_timer_(io_),
      health_(io_.get_executor(), pool_, config_.health_interval, config_.health_timeout, id_),
      api_(pool_, upstream_connections_, metrics_, admission_, config_.admin_api_key, config_.metrics_without_auth,
           [this](const ReplicaAddress& address) { health_.check(address); }),
      acceptor_(asio::make_strand(io_)),
      signals_(io_, SIGINT, SIGTERM) {
  if (config_.num_io_threads < 1) fail("gateway: --threads must be at least 1, got {}", config_.num_io_threads);
  boost::system::error_code ec;
  const asio::ip::address address = asio::ip::make_address(config_.host, ec);
  if (ec) fail("gateway: --host '{}' is not an IP address", config_.host);
  const tcp::endpoint endpoint(address, config_.port);
  acceptor_.open(endpoint.protocol(), ec);
  if (!ec) acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor_.bind(endpoint, ec);
  if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) fail("gateway: cannot listen on {}:{}: {}", config_.host, config_.port, ec.message());
  port_ = acceptor_.local_endpoint().port();
  // Checked once the port is known: a replica on the gateway's own address is refused.
  admission_.set_listen_address(address, port_);
  for (const std::string& url : config_.replica_urls) {
    const ReplicaAddress replica = parse_replica_url(url);
    admission_.check(replica, ReplicaOrigin::kCommandLine);
    if (!pool_.add(replica)) fail("gateway: replica {} is given twice", url);
  }
  for (const std::string& url : config_.prefill_urls) {
    admission_.check(parse_replica_url(url), ReplicaOrigin::kCommandLine);
  }
  if (!config_.prefill_urls.empty()) prefill_router_.emplace(config_.prefill_urls, config_.decode_kv_endpoints);
}

GatewayServer::~GatewayServer() = default;

void GatewayServer::accept() {
  acceptor_.async_accept(asio::make_strand(io_), [this](boost::system::error_code ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted || !acceptor_.is_open()) return;  // shutting down
    if (!ec) std::make_shared<GatewaySession>(std::move(socket), *this)->start();
    accept();
  });
}

void GatewayServer::run() {
  std::fprintf(stderr, "tern gateway: listening on http://%s:%u (policy %s, %zu replicas)\n", config_.host.c_str(),
               port_, std::string(pool_.policy_name()).c_str(), pool_.list().size());
  wait_for_signal();
  health_.start();
  close_expired_upstream_connections();
  accept();
  std::vector<std::thread> threads;
  for (int i = 0; i < config_.num_io_threads; ++i) threads.emplace_back([this] { io_.run(); });
  connections_.wait_for_shutdown_request();
  connections_.drain(config_.drain_timeout, [](int64_t num_cut) {
    std::fprintf(stderr, "tern gateway: %lld requests still in flight; closing their connections\n",
                 static_cast<long long>(num_cut));
  });
  io_.stop();
  for (std::thread& thread : threads) thread.join();
  upstream_connections_.close_all();
  std::fprintf(stderr, "tern gateway: stopped\n");
}

void GatewayServer::wait_for_signal() {
  signals_.async_wait([this](boost::system::error_code ec, int signal) {
    if (ec) return;
    const char* name = signal == SIGINT ? "SIGINT" : "SIGTERM";
    if (connections_.draining()) {
      std::fprintf(stderr, "tern gateway: received %s again, stopping now\n", name);
    } else {
      std::fprintf(stderr, "tern gateway: received %s, draining (at most %.1f s)\n", name,
                   std::chrono::duration<double>(config_.drain_timeout).count());
    }
    connections_.begin_shutdown(io_, acceptor_, [this](tcp::socket socket) {
      std::make_shared<GatewaySession>(std::move(socket), *this)->start();
    });
    wait_for_signal();
  });
}

void GatewayServer::close_expired_upstream_connections() {
  upstream_connections_.close_expired();
  upstream_sweep_timer_.expires_after(kUpstreamSweepInterval);
  upstream_sweep_timer_.async_wait([this](boost::system::error_code ec) {
    if (!ec) close_expired_upstream_connections();
  });
}

}  // namespace tern::gateway
