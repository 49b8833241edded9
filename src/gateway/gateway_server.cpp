#include "gateway/gateway_server.h"

#include <csignal>
#include <cstdio>

#include "core/error.h"
#include "gateway/gateway_session.h"

namespace tern::gateway {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

GatewayServer::GatewayServer(GatewayConfig config)
    : config_(std::move(config)),
      pool_(make_routing_policy(config_.policy, config_.cache_aware)),
      health_(io_.get_executor(), pool_, config_.health_interval, config_.health_timeout),
      api_(pool_, metrics_, config_.api_key, [this](const ReplicaAddress& address) { health_.check(address); }),
      acceptor_(io_),
      signals_(io_, SIGINT, SIGTERM) {
  if (config_.num_io_threads < 1) fail("gateway: --threads must be at least 1, got {}", config_.num_io_threads);
  for (const std::string& url : config_.replica_urls) {
    if (!pool_.add(parse_replica_url(url))) fail("gateway: replica {} is given twice", url);
  }
  if (!config_.prefill_urls.empty()) prefill_router_.emplace(config_.prefill_urls, config_.decode_kv_endpoints);
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
}

GatewayServer::~GatewayServer() = default;

void GatewayServer::accept() {
  acceptor_.async_accept(asio::make_strand(io_), [this](boost::system::error_code ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted) return;  // shutting down
    if (!ec) std::make_shared<GatewaySession>(std::move(socket), *this)->start();
    accept();
  });
}

void GatewayServer::run() {
  std::fprintf(stderr, "tern gateway: listening on http://%s:%u (policy %s, %zu replicas)\n", config_.host.c_str(),
               port_, std::string(pool_.policy_name()).c_str(), pool_.list().size());
  signals_.async_wait([this](boost::system::error_code, int signal) {
    std::fprintf(stderr, "tern gateway: signal %d, stopping\n", signal);
    acceptor_.close();
    health_.stop();
    io_.stop();
  });
  health_.start();
  accept();
  std::vector<std::thread> threads;
  for (int i = 1; i < config_.num_io_threads; ++i) threads.emplace_back([this] { io_.run(); });
  io_.run();
  for (std::thread& thread : threads) thread.join();
}

}  // namespace tern::gateway
