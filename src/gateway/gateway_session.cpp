#include "gateway/gateway_session.h"

#include <cstdio>

#include "gateway/gateway_server.h"
#include "gateway/routing_text.h"
#include "server/api_error.h"

namespace tern::gateway {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using server::ApiError;
using server::HttpReply;

namespace {

// The request headers a replica needs; hop-by-hop ones (Connection, Transfer-Encoding, ...) are the gateway's own.
constexpr http::field kForwardedRequestFields[] = {http::field::content_type, http::field::authorization,
                                                   http::field::accept, http::field::user_agent};
// The response headers relayed to the client besides Content-Type and Content-Length.
constexpr http::field kRelayedResponseFields[] = {http::field::cache_control, http::field::www_authenticate};

std::string_view view(beast::string_view text) { return {text.data(), text.size()}; }

}  // namespace

GatewaySession::GatewaySession(asio::ip::tcp::socket socket, GatewayServer& server)
    : stream_(std::move(socket)), server_(server) {}

GatewaySession::~GatewaySession() {
  end_exchange();
  server_.connections().remove(this);
}

void GatewaySession::start() {
  server_.connections().add(shared_from_this());
  beast::error_code ignored;
  stream_.socket().set_option(asio::ip::tcp::no_delay(true), ignored);
  asio::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->read_request(); });
}

void GatewaySession::close_if_idle() {
  asio::post(stream_.get_executor(), [self = shared_from_this()] {
    if (!self->in_exchange_) self->close();
  });
}

void GatewaySession::abort() {
  asio::post(stream_.get_executor(), [self = shared_from_this()] { self->close(); });
}

void GatewaySession::begin_exchange() {
  if (in_exchange_) return;  // a pipelined request, counted since the previous response
  in_exchange_ = true;
  server_.connections().exchange_started();
}

void GatewaySession::end_exchange() {
  if (!in_exchange_) return;
  in_exchange_ = false;
  server_.connections().exchange_ended();
}

void GatewaySession::read_request() {
  parser_.emplace();
  parser_->body_limit(server_.config().max_body_bytes);
  stream_.expires_after(server_.config().header_timeout);
  http::async_read(stream_, buffer_, *parser_, [self = shared_from_this()](beast::error_code ec, size_t) {
    self->on_request(ec);
  });
}

void GatewaySession::on_request(beast::error_code ec) {
  if (ec == http::error::body_limit) {
    begin_exchange();
    request_ = {};
    request_.keep_alive(false);
    received_at_ = Clock::now();
    return send_reply(HttpReply::error(
        ApiError(413, fmt::format("request body is larger than {} bytes", server_.config().max_body_bytes))));
  }
  if (ec) return close();  // EOF, timeout or a malformed request: nothing useful to answer
  begin_exchange();
  stream_.expires_never();
  request_ = parser_->release();
  received_at_ = Clock::now();
  if (view(request_[kGatewayIdField]) == server_.id()) {
    return send_reply(HttpReply::error(ApiError(508, "this request came from this gateway itself: a replica URL is "
                                                     "another name for the gateway", std::nullopt, "loop_detected")));
  }
  if (server_.connections().draining()) {
    return send_reply(
        HttpReply::error(ApiError(503, "the gateway is shutting down", std::nullopt, "server_shutting_down")));
  }
  const std::string_view target = view(request_.target());
  path_ = std::string(target.substr(0, target.find('?')));
  if (GatewayApi::is_forwarded(path_)) return forward();
  const std::string_view authorization = view(request_[http::field::authorization]);
  send_reply(server_.api().handle(view(request_.method_string()), path_, authorization, request_.body()));
}

void GatewaySession::send_reply(const HttpReply& reply) {
  auto response = std::make_shared<http::response<http::string_body>>(static_cast<http::status>(reply.status), 11);
  response->set(http::field::content_type, reply.content_type);
  response->keep_alive(request_.keep_alive() && !server_.connections().draining());
  response->body() = reply.body;
  response->prepare_payload();
  const int status = reply.status;
  http::async_write(stream_, *response, [self = shared_from_this(), response, status](beast::error_code ec, size_t) {
    self->server_.metrics().count_response(status);
    if (ec) return self->close();
    self->continue_or_close(response->keep_alive());
  });
}

void GatewaySession::continue_or_close(bool keep_alive) {
  if (!keep_alive) return close();
  // A pipelined request already received stays counted as in flight, so that a drain answers it (503) instead of
  // cutting the connection under it.
  const bool pipelined = buffer_.size() > 0;
  if (!pipelined) end_exchange();
  if (server_.connections().draining() && !pipelined) return close();
  read_request();
}

void GatewaySession::forward() {
  routing_text_.clear();
  if (server_.pool().policy_needs_text() && request_.method() == http::verb::post) {
    routing_text_ = routing_text(path_, request_.body());
  }
  failed_replicas_.clear();
  last_replica_error_.reset();
  try_next_replica();
}

void GatewaySession::try_next_replica() {
  const std::optional<ReplicaLease> lease = server_.pool().acquire({routing_text_}, failed_replicas_);
  if (!lease) {
    server_.metrics().count_unserved();
    if (last_replica_error_) return send_reply(*last_replica_error_);
    const std::string message = failed_replicas_.empty()
                                    ? "no healthy replica to serve the request"
                                    : fmt::format("every healthy replica failed the request ({} tried)",
                                                  failed_replicas_.size());
    return send_reply(HttpReply::error(ApiError(503, message)));
  }
  if (!failed_replicas_.empty()) server_.metrics().count_retry();
  server_.metrics().count_routed(lease->address.url, server_.pool().policy_name(), lease->reason);
  upstream_leased_ = true;

  UpstreamExchange::Request upstream_request{request_.method(), request_.target(), 11};
  for (http::field field : kForwardedRequestFields) {
    if (auto it = request_.find(field); it != request_.end()) upstream_request.set(field, it->value());
  }
  upstream_request.set(kGatewayIdField, server_.id());
  upstream_request.body() = request_.body();
  upstream_ = std::make_shared<UpstreamExchange>(stream_.get_executor(), lease->address, std::move(upstream_request),
                                                 server_.config().upstream, &server_.upstream_connections());
  // Prefill/decode mode: the first attempt goes through a prefill replica first; a retry does not (the decode
  // replica computes what is missing).
  if (PrefillRouter* router = server_.prefill_router(); router && failed_replicas_.empty()) {
    if (auto target = router->route(path_, request_.body(), lease->address)) return run_prefill_hop(std::move(*target));
  }
  start_upstream();
}

void GatewaySession::start_upstream() {
  upstream_->start([self = shared_from_this()](beast::error_code ec) { self->on_upstream_head(ec); });
}

void GatewaySession::run_prefill_hop(PrefillTarget target) {
  UpstreamExchange::Request prefill_request{http::verb::post, path_, 11};
  for (http::field field : kForwardedRequestFields) {
    if (auto it = request_.find(field); it != request_.end()) prefill_request.set(field, it->value());
  }
  prefill_request.set(http::field::content_type, "application/json");
  prefill_request.set(kGatewayIdField, server_.id());
  prefill_request.body() = std::move(target.body);
  const UpstreamTimeouts timeouts{server_.config().upstream.connect, server_.config().prefill_timeout};
  prefill_ = std::make_shared<UpstreamExchange>(stream_.get_executor(), target.prefill, std::move(prefill_request),
                                                timeouts, &server_.upstream_connections());
  prefill_->start([self = shared_from_this()](beast::error_code ec) {
    if (self->closed_) return;
    if (ec) return self->end_prefill_hop(fmt::format("no response: {}", ec.message()));
    self->read_prefill_answer();
  });
}

void GatewaySession::read_prefill_answer() {
  prefill_->read_body([self = shared_from_this()](beast::error_code ec, std::string_view, bool done) {
    if (self->closed_) return;
    if (ec) return self->end_prefill_hop(fmt::format("answer cut off: {}", ec.message()));
    if (!done) return self->read_prefill_answer();
    const unsigned status = self->prefill_->head().result_int();
    self->end_prefill_hop(status == 200 ? std::string() : fmt::format("status {}", status));
  });
}

void GatewaySession::end_prefill_hop(const std::string& failure) {
  if (!failure.empty()) {
    std::fprintf(stderr, "tern gateway: prefill on %s failed (%s); the decode replica prefills itself\n",
                 prefill_->address().url.c_str(), failure.c_str());
  }
  prefill_->finish();
  prefill_.reset();
  start_upstream();
}

void GatewaySession::on_upstream_head(beast::error_code ec) {
  if (closed_) return;
  if (ec) {
    std::fprintf(stderr, "tern gateway: request to %s failed before a response: %s\n",
                 upstream_->address().url.c_str(), ec.message().c_str());
    return fail_over(/*mark_unhealthy=*/true);
  }
  const double added_s = std::chrono::duration<double>(upstream_->request_sent_at() - received_at_).count();
  server_.metrics().observe_added_latency(added_s);
  if (upstream_->head().result_int() >= 500) {
    // Not yet sent on: read the error body (to pass on if every replica fails), then try another replica.
    failed_body_.clear();
    return upstream_->read_body([self = shared_from_this()](beast::error_code ec, std::string_view data, bool done) {
      self->collect_failed_body(ec, data, done);
    });
  }
  relay_head();
}

void GatewaySession::collect_failed_body(beast::error_code ec, std::string_view data, bool done) {
  if (closed_) return;
  failed_body_ += data;
  if (!ec && !done) {
    return upstream_->read_body([self = shared_from_this()](beast::error_code ec, std::string_view data, bool done) {
      self->collect_failed_body(ec, data, done);
    });
  }
  const auto& head = upstream_->head();
  last_replica_error_ = HttpReply{static_cast<int>(head.result_int()), std::string(head[http::field::content_type]),
                                  failed_body_};
  fail_over(/*mark_unhealthy=*/false);  // a 5xx answer is the replica's own; its /health says whether it is up
}

void GatewaySession::fail_over(bool mark_unhealthy) {
  const std::string url = upstream_->address().url;
  upstream_->cancel();
  server_.pool().release(url);
  upstream_leased_ = false;
  server_.metrics().count_replica_failure(url);
  if (mark_unhealthy && server_.pool().set_healthy(url, false)) {
    std::fprintf(stderr, "tern gateway: replica %s is unhealthy (a request failed on it)\n", url.c_str());
  }
  failed_replicas_.push_back(url);
  try_next_replica();
}

void GatewaySession::relay_head() {
  const auto& upstream_head = upstream_->head();
  relay_head_.emplace(upstream_head.result(), 11);
  auto& head = *relay_head_;
  if (auto it = upstream_head.find(http::field::content_type); it != upstream_head.end()) {
    head.set(http::field::content_type, it->value());
  }
  for (http::field field : kRelayedResponseFields) {
    if (auto it = upstream_head.find(field); it != upstream_head.end()) head.set(field, it->value());
  }
  head.keep_alive(request_.keep_alive() && !server_.connections().draining());
  // A length the replica announced is passed on (the body is then relayed raw); otherwise chunked.
  const auto content_length = upstream_->head().count(http::field::content_length)
                                  ? std::optional<std::string>(std::string(upstream_head[http::field::content_length]))
                                  : std::nullopt;
  relay_chunked_ = !content_length.has_value();
  if (relay_chunked_) {
    head.chunked(true);
  } else {
    head.set(http::field::content_length, *content_length);
  }
  relay_serializer_.emplace(head);
  http::async_write_header(stream_, *relay_serializer_, [self = shared_from_this()](beast::error_code ec, size_t) {
    if (ec) return self->close();
    self->relay_body();
  });
}

void GatewaySession::relay_body() {
  upstream_->read_body([self = shared_from_this()](beast::error_code ec, std::string_view data, bool done) {
    self->on_upstream_piece(ec, data, done);
  });
}

void GatewaySession::on_upstream_piece(beast::error_code ec, std::string_view data, bool done) {
  if (closed_) return;
  if (ec) {
    // The client already has part of the response: it cannot be retried, only cut off.
    server_.metrics().count_broken_response();
    server_.metrics().count_replica_failure(upstream_->address().url);
    return close();
  }
  // The replica's part is over: its connection can serve another request while the last bytes reach the client
  // (a client that sends its next request at once then finds it in the pool).
  if (done) end_upstream();
  auto after_write = [self = shared_from_this(), done](beast::error_code ec, size_t) {
    if (ec) return self->close();
    if (done) return self->finish_relay();
    self->relay_body();
  };
  if (data.empty()) {
    if (done) return finish_relay();
    return relay_body();
  }
  if (relay_chunked_) {
    asio::async_write(stream_, http::make_chunk(asio::buffer(data)), std::move(after_write));
  } else {
    asio::async_write(stream_, asio::buffer(data), std::move(after_write));
  }
}

void GatewaySession::finish_relay() {
  const int status = relay_head_->result_int();
  if (!relay_chunked_) return finish_forwarding(status);
  asio::async_write(stream_, http::make_chunk_last(), [self = shared_from_this(), status](beast::error_code ec, size_t) {
    if (ec) return self->close();
    self->finish_forwarding(status);
  });
}

void GatewaySession::end_upstream() {
  // A replica removed from the pool meanwhile keeps no idle connection.
  const bool still_in_pool = server_.pool().release(upstream_->address().url);
  upstream_leased_ = false;
  if (still_in_pool) {
    upstream_->finish();
  } else {
    upstream_->cancel();
  }
}

void GatewaySession::finish_forwarding(int status) {
  upstream_.reset();
  server_.metrics().count_response(status);
  continue_or_close(relay_head_->keep_alive());
}

void GatewaySession::close() {
  end_exchange();
  if (closed_) return;
  closed_ = true;
  if (prefill_) prefill_->cancel();
  if (upstream_) {
    upstream_->cancel();  // the replica sees the client go and cancels the generation
    if (upstream_leased_) server_.pool().release(upstream_->address().url);
    upstream_leased_ = false;
  }
  beast::error_code ignored;
  stream_.socket().shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
  stream_.close();
}

}  // namespace tern::gateway
