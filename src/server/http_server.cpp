#include "server/http_server.h"

#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <csignal>
#include <cstdio>

#include "core/error.h"
#include "server/http_session.h"

namespace tern::server {

namespace net = boost::asio;
using tcp = net::ip::tcp;

HttpServer::HttpServer(HttpServerConfig config, OpenAiApi& api, ServerMetrics& metrics)
    : config_(std::move(config)), api_(api), metrics_(metrics), acceptor_(net::make_strand(io_)), signals_(io_, SIGINT, SIGTERM),
      workers_(static_cast<size_t>(std::max(1, config_.num_worker_threads))) {
  boost::system::error_code ec;
  const auto address = net::ip::make_address(config_.host, ec);
  if (ec) fail("--host {}: not an IP address ({})", config_.host, ec.message());
  const tcp::endpoint endpoint(address, config_.port);
  acceptor_.open(endpoint.protocol(), ec);
  if (!ec) acceptor_.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) acceptor_.bind(endpoint, ec);
  if (!ec) acceptor_.listen(net::socket_base::max_listen_connections, ec);
  if (ec) fail("cannot listen on {}:{}: {}", config_.host, config_.port, ec.message());
  port_ = acceptor_.local_endpoint().port();
}

HttpServer::~HttpServer() { stop(); }

void HttpServer::start() {
  accept();
  wait_for_signal();
  const int num_threads = std::max(1, config_.num_io_threads);
  for (int i = 0; i < num_threads; ++i) io_threads_.emplace_back([this] { io_.run(); });
}

void HttpServer::wait_for_signal() {
  signals_.async_wait([this](const boost::system::error_code& ec, int signal) {
    if (ec) return;
    std::fprintf(stderr, "tern: received %s, draining\n", signal == SIGINT ? "SIGINT" : "SIGTERM");
    begin_shutdown();
    wait_for_signal();
  });
}

void HttpServer::accept() {
  acceptor_.async_accept(net::make_strand(io_), [this](boost::system::error_code ec, tcp::socket socket) {
    if (ec == net::error::operation_aborted || !acceptor_.is_open()) return;
    if (ec) {
      // Out of descriptors or similar: pause instead of spinning, then keep accepting.
      std::fprintf(stderr, "tern: accept failed: %s\n", ec.message().c_str());
      auto timer = std::make_shared<net::steady_timer>(io_, std::chrono::milliseconds(100));
      timer->async_wait([this, timer](const boost::system::error_code&) { accept(); });
      return;
    }
    std::make_shared<HttpSession>(std::move(socket), *this)->start();
    accept();
  });
}

void HttpServer::begin_shutdown() {
  connections_.begin_shutdown(io_, acceptor_, [this](tcp::socket socket) {
    std::make_shared<HttpSession>(std::move(socket), *this)->start();
  });
}

void HttpServer::wait_for_shutdown_request() { connections_.wait_for_shutdown_request(); }

void HttpServer::drain(std::chrono::milliseconds timeout) {
  connections_.drain(timeout, [](int64_t num_cut) {
    std::fprintf(stderr, "tern: %lld requests still in flight; cancelling them\n", static_cast<long long>(num_cut));
  });
}

void HttpServer::stop() {
  io_.stop();
  for (auto& thread : io_threads_) thread.join();
  io_threads_.clear();
  workers_.join();
}

}  // namespace tern::server
