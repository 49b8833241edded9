#pragma once
// One attempt at one request on one replica: connect, send the request, read the response head; then, if the
// caller takes the response, read its body piece by piece as the replica sends it (so SSE streams pass through
// as they are produced). Runs on the executor it is given (the client connection's strand); one operation at a
// time. A new connection per request, closed after it ("Connection: close"): the replica sees each request's
// end as the end of a connection, and a replica that was restarted never leaves stale pooled sockets behind.
#include <boost/asio/any_io_executor.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <array>
#include <chrono>
#include <functional>
#include <memory>
#include <string_view>

#include "gateway/replica_address.h"

namespace tern::gateway {

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

  UpstreamExchange(boost::asio::any_io_executor executor, ReplicaAddress address, Request request,
                   UpstreamTimeouts timeouts);

  const ReplicaAddress& address() const { return address_; }
  // Calls `on_head` once the response head is in, or with the error that came before it.
  void start(HeadHandler on_head);
  const ResponseHead& head() const { return parser_.get().base(); }
  bool body_done() const { return parser_.is_done(); }
  std::chrono::steady_clock::time_point request_sent_at() const { return request_sent_at_; }
  void read_body(BodyHandler on_piece);
  // Closes the connection: the replica sees the client go away (and cancels a generation in progress).
  void cancel();

 private:
  void connect(const boost::asio::ip::tcp::resolver::results_type& endpoints);
  void on_connected(boost::beast::error_code ec);
  void on_written(boost::beast::error_code ec);
  void report_head(boost::beast::error_code ec);

  ReplicaAddress address_;
  Request request_;
  UpstreamTimeouts timeouts_;
  boost::asio::ip::tcp::resolver resolver_;
  boost::beast::tcp_stream stream_;
  boost::beast::flat_buffer buffer_;
  boost::beast::http::response_parser<boost::beast::http::buffer_body> parser_;
  std::array<char, 64 * 1024> piece_;
  HeadHandler on_head_;
  std::chrono::steady_clock::time_point request_sent_at_;
};

}  // namespace tern::gateway
