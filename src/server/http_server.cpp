#include "server/http_server.h"

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <csignal>
#include <cstdio>

#include "core/error.h"
#include "server/http_session.h"

namespace tern::server {

namespace net = boost::asio;
using tcp = net::ip::tcp;

namespace {

constexpr auto kCloseTimeout = std::chrono::seconds(2);

}  // namespace

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

bool HttpServer::draining() const {
  std::lock_guard lock(mutex_);
  return shutdown_requested_;
}

void HttpServer::begin_shutdown() {
  {
    std::lock_guard lock(mutex_);
    if (shutdown_requested_) shutdown_forced_ = true;
    shutdown_requested_ = true;
  }
  changed_.notify_all();
  net::post(acceptor_.get_executor(), [this] {
    if (!acceptor_.is_open()) return;
    for (const auto& session : live_sessions()) session->close_if_idle();
    // Connections the kernel completed but we have not accepted yet would be reset by the close: take them, so
    // that their requests get an answer (503) and their clients a clean close.
    boost::system::error_code ec;
    acceptor_.non_blocking(true, ec);
    while (!ec) {
      tcp::socket socket(net::make_strand(io_));
      acceptor_.accept(socket, ec);
      if (!ec) std::make_shared<HttpSession>(std::move(socket), *this)->start();
    }
    acceptor_.close(ec);
  });
}

void HttpServer::wait_for_shutdown_request() {
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [&] { return shutdown_requested_; });
}

void HttpServer::drain(std::chrono::milliseconds timeout) {
  {
    std::unique_lock lock(mutex_);
    changed_.wait_for(lock, timeout, [&] { return num_exchanges_ == 0 || shutdown_forced_; });
    if (num_exchanges_ > 0) {
      std::fprintf(stderr, "tern: %lld requests still in flight; cancelling them\n",
                   static_cast<long long>(num_exchanges_));
    }
  }
  for (const auto& session : live_sessions()) session->abort();
  // Closing a connection completes its pending operations, whose handlers hold the session: wait for them to run,
  // so that stop() does not drop sockets mid-close.
  std::unique_lock lock(mutex_);
  changed_.wait_for(lock, kCloseTimeout, [&] { return sessions_.empty(); });
}

void HttpServer::stop() {
  io_.stop();
  for (auto& thread : io_threads_) thread.join();
  io_threads_.clear();
  workers_.join();
}

void HttpServer::add_session(const std::shared_ptr<HttpSession>& session) {
  std::lock_guard lock(mutex_);
  sessions_[session.get()] = session;
}

void HttpServer::remove_session(const HttpSession* session) {
  {
    std::lock_guard lock(mutex_);
    sessions_.erase(session);
  }
  changed_.notify_all();
}

std::vector<std::shared_ptr<HttpSession>> HttpServer::live_sessions() {
  std::lock_guard lock(mutex_);
  std::vector<std::shared_ptr<HttpSession>> live;
  for (const auto& [pointer, weak] : sessions_) {
    if (auto session = weak.lock()) live.push_back(std::move(session));
  }
  return live;
}

void HttpServer::exchange_started() {
  std::lock_guard lock(mutex_);
  ++num_exchanges_;
}

void HttpServer::exchange_ended() {
  {
    std::lock_guard lock(mutex_);
    --num_exchanges_;
  }
  changed_.notify_all();
}

}  // namespace tern::server
