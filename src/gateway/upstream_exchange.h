#pragma once
// One attempt at one request on one replica: take an idle keep-alive connection from the pool or connect, send
// the request, read the response head; then, if the caller takes the response, read its body piece by piece as
// the replica sends it (so SSE streams pass through as they are produced). Runs on the executor it is given (the
// client connection's strand); one operation at a time.
//
// Connections are reused (HTTP/1.1 keep-alive) when a pool is given: finish() hands the connection back only when
// the response was read to its end and the replica did not say "Connection: close"; every other ending (cancel(),
// an error, a response cut short) closes it, so a replica still sees a client that went away mid-stream as a
// closed connection and cancels the generation. A pooled connection the replica closed while it was idle (it
// restarted, or its keep-alive timeout passed) fails before any response byte arrives: the request is then sent
// once more on a fresh connection, invisibly to the caller (no failover, the replica is not marked). Without a
// pool (health checks) each exchange has a connection of its own, closed after it ("Connection: close").
#include <boost/asio/any_io_executor.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <array>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string_view>

#include "gateway/replica_address.h"
#include "gateway/upstream_connection_pool.h"

namespace tern::gateway {

// Every request the gateway sends to a replica carries this header with the gateway's own random id; a request that
// arrives carrying it has come back (a replica URL that is another name for the gateway) and is answered 508
// instead of being forwarded again, and a health check that comes back fails.
inline constexpr char kGatewayIdField[] = "X-Tern-Gateway-Id";

struct UpstreamTimeouts {
  std::chrono::milliseconds connect{5'000};
  // Until the response head arrives; zero: no limit (a non-streaming generation sends its head only at the end).
  std::chrono::milliseconds response_head{0};
};

class UpstreamExchange : public std::enable_shared_from_this<UpstreamExchange> {
 public:
  using Request = boost::beast::http::request<boost::beast::http::string_body>;
  using ResponseHead = boost::beast::http::response_header<>;
  using HeadHandler = std::function<void(boost::beast::error_code)>;
  // `data` stays valid until the next read_body call; `done` once the whole body has been read.
  using BodyHandler = std::function<void(boost::beast::error_code, std::string_view data, bool done)>;

  // `pool` (may be null: a connection of its own) must outlive the exchange.
  UpstreamExchange(boost::asio::any_io_executor executor, ReplicaAddress address, Request request,
                   UpstreamTimeouts timeouts, UpstreamConnectionPool* pool);

  const ReplicaAddress& address() const { return address_; }
  // Calls `on_head` once the response head is in, or with the error that came before it.
  void start(HeadHandler on_head);
  const ResponseHead& head() const { return parser_->get().base(); }
  std::chrono::steady_clock::time_point request_sent_at() const { return request_sent_at_; }
  void read_body(BodyHandler on_piece);
  // Ends an exchange whose response the caller is done with: the connection goes back to the pool if it can carry
  // another request, else it is closed.
  void finish();
  // Closes the connection: the replica sees the client go away (and cancels a generation in progress).
  void cancel();

 private:
  void connect_fresh();
  void connect(const boost::asio::ip::tcp::resolver::results_type& results);
  void on_connected(boost::beast::error_code ec);
  void send();
  void on_written(boost::beast::error_code ec);
  // An error before the response head: retried on a fresh connection if a stale pooled one caused it.
  void on_failed_before_response(boost::beast::error_code ec);
  void report_head(boost::beast::error_code ec);

  ReplicaAddress address_;
  Request request_;
  UpstreamTimeouts timeouts_;
  UpstreamConnectionPool* pool_;
  boost::asio::ip::tcp::resolver resolver_;
  boost::beast::tcp_stream stream_;
  bool reused_connection_ = false;
  boost::beast::flat_buffer buffer_;
  std::optional<boost::beast::http::response_parser<boost::beast::http::buffer_body>> parser_;
  std::array<char, 64 * 1024> piece_;
  HeadHandler on_head_;
  std::chrono::steady_clock::time_point request_sent_at_;
};

}  // namespace tern::gateway
