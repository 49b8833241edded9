#pragma once
// One client connection to the gateway: reads requests one at a time (keep-alive); answers the gateway's own
// endpoints, and forwards the OpenAI ones to a replica chosen by the pool. A replica that fails before anything
// of its response reached the client (refused, reset, timed out, or a 5xx) is marked and the request goes to
// another one; once the response head has been sent on, the body is relayed piece by piece as it arrives and a
// failure can only close the connection. Every handler runs on the connection's strand. While the gateway drains,
// a request that arrives gets 503 and the connection is closed after the response in progress.
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gateway/prefill_router.h"
#include "gateway/upstream_exchange.h"
#include "server/http_reply.h"

namespace tern::gateway {

class GatewayServer;

class GatewaySession : public std::enable_shared_from_this<GatewaySession> {
 public:
  GatewaySession(boost::asio::ip::tcp::socket socket, GatewayServer& server);
  ~GatewaySession();
  void start();
  // Thread-safe (posted to the strand): closes the connection if no request is in flight on it (draining).
  void close_if_idle();
  // Thread-safe: closes the connection, cutting a response in progress (a drain that ran out of time).
  void abort();

 private:
  using Clock = std::chrono::steady_clock;
  using Request = boost::beast::http::request<boost::beast::http::string_body>;

  void read_request();
  void on_request(boost::beast::error_code ec);
  void send_reply(const server::HttpReply& reply);
  // After a response: the next request, or the close (the client's or the replica's wish, or a drain).
  void continue_or_close(bool keep_alive);
  // Keep the server's count of requests in flight, which a drain waits on.
  void begin_exchange();
  void end_exchange();

  void forward();
  void try_next_replica();
  void start_upstream();
  // Prefill/decode mode: the request's prefill on a prefill replica, then start_upstream() whatever its outcome.
  void run_prefill_hop(PrefillTarget target);
  void read_prefill_answer();
  void end_prefill_hop(const std::string& failure);
  void on_upstream_head(boost::beast::error_code ec);
  void collect_failed_body(boost::beast::error_code ec, std::string_view data, bool done);
  void fail_over(bool mark_unhealthy);
  void relay_head();
  void relay_body();
  void on_upstream_piece(boost::beast::error_code ec, std::string_view data, bool done);
  // The response has been read to its end: the replica's lease and connection are given back.
  void end_upstream();
  void finish_relay();
  void finish_forwarding(int status);

  void close();

  boost::beast::tcp_stream stream_;
  boost::beast::flat_buffer buffer_;
  std::optional<boost::beast::http::request_parser<boost::beast::http::string_body>> parser_;
  GatewayServer& server_;

  // The exchange in progress.
  Request request_;
  std::string path_;
  Clock::time_point received_at_;
  std::string routing_text_;
  std::vector<std::string> failed_replicas_;
  std::optional<server::HttpReply> last_replica_error_;  // a replica's 5xx, passed on if no replica does better
  std::string failed_body_;
  std::shared_ptr<UpstreamExchange> upstream_;
  std::shared_ptr<UpstreamExchange> prefill_;  // the prefill hop in progress (prefill/decode mode)
  bool upstream_leased_ = false;
  bool relay_chunked_ = false;
  std::optional<boost::beast::http::response<boost::beast::http::empty_body>> relay_head_;
  std::optional<boost::beast::http::response_serializer<boost::beast::http::empty_body>> relay_serializer_;
  std::shared_ptr<server::HttpReply> reply_in_flight_;
  bool in_exchange_ = false;
  bool closed_ = false;
};

}  // namespace tern::gateway
