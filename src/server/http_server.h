#pragma once
// The HTTP/1.1 front end: one acceptor, a small pool of I/O threads running every connection asynchronously
// (Boost.Asio/Beast, a strand per connection, so thousands of open streams cost no threads), and a pool of
// worker threads for the CPU-heavy part of requests (JSON, chat templates, tokenization).
// Shutdown drains: stop accepting, close idle connections, let in-flight exchanges finish, then stop.
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/thread_pool.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "server/connection_drain.h"
#include "server/metrics.h"
#include "server/openai_api.h"

namespace tern::server {

class HttpSession;

struct HttpServerConfig {
  std::string host = "127.0.0.1";
  uint16_t port = 8000;  // 0: any free port (see HttpServer::port)
  int num_io_threads = 2;
  int num_worker_threads = 2;
  // A client must send a whole request head within this time (of connecting, or of the previous response on a
  // kept-alive connection), and each body within it again: slow-loris clients are dropped.
  std::chrono::milliseconds header_timeout{30'000};
  std::chrono::milliseconds write_timeout{60'000};  // a client that reads nothing for this long is dropped
  uint64_t max_body_bytes = 32ull << 20;            // larger bodies get 413
  size_t max_buffered_stream_bytes = 8u << 20;      // a stream whose client lags by more is cancelled
  bool log_requests = true;                         // one line per request on stderr
};

class HttpServer {
 public:
  // Binds and listens (throws tern::Error naming the address when it cannot); serves nothing until start().
  HttpServer(HttpServerConfig config, OpenAiApi& api, ServerMetrics& metrics);
  ~HttpServer();

  uint16_t port() const { return port_; }
  // Starts the I/O and worker threads and the accept loop; SIGINT and SIGTERM call begin_shutdown().
  void start();
  // Stops accepting and closes idle connections; in-flight exchanges continue, requests that arrive get 503.
  // Thread-safe; a second call (e.g. a second Ctrl-C) also ends the wait in drain().
  void begin_shutdown();
  // Blocks until begin_shutdown() has been called.
  void wait_for_shutdown_request();
  // Blocks until no exchange is in flight, the timeout passes or shutdown is forced; then closes every connection
  // and waits briefly for the closes to complete. Generations still running are cancelled, and their responses
  // ended first: streams with finish_reason "abort" and [DONE], whole responses with a 503.
  void drain(std::chrono::milliseconds timeout);
  // Stops the I/O threads and joins every thread. Engine callbacks may still post afterwards (harmlessly).
  void stop();

  // For connections.
  const HttpServerConfig& config() const { return config_; }
  OpenAiApi& api() { return api_; }
  ServerMetrics& metrics() { return metrics_; }
  boost::asio::thread_pool& workers() { return workers_; }
  ConnectionDrain<HttpSession>& connections() { return connections_; }

 private:
  void accept();
  void wait_for_signal();

  HttpServerConfig config_;
  OpenAiApi& api_;
  ServerMetrics& metrics_;

  // Declared before io_: sessions that die with io_'s pending handlers still unregister here.
  ConnectionDrain<HttpSession> connections_;

  boost::asio::io_context io_;
  boost::asio::ip::tcp::acceptor acceptor_;
  boost::asio::signal_set signals_;
  boost::asio::thread_pool workers_;
  uint16_t port_ = 0;
  std::vector<std::thread> io_threads_;
};

}  // namespace tern::server
