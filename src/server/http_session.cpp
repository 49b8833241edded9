#include "server/http_session.h"

#include <sys/socket.h>

#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <cctype>
#include <cerrno>
#include <cstdio>

#include "core/error.h"
#include "server/http_server.h"
#include "server/request_head.h"

namespace tern::server {

namespace beast = boost::beast;
namespace http = boost::beast::http;
namespace net = boost::asio;

namespace {

constexpr size_t kMaxHeaderBytes = 64 * 1024;
constexpr auto kLingerTime = std::chrono::seconds(2);

double seconds_between(std::chrono::steady_clock::time_point from, std::chrono::steady_clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

// One HTTP/1.1 chunk of a chunked body.
std::string chunk_frame(const std::string& bytes) { return fmt::format("{:x}\r\n{}\r\n", bytes.size(), bytes); }

// `keep_alive_hint` is the Keep-Alive header's value; empty closes the connection after the stream.
std::string stream_header(const std::string& request_id, const std::string& keep_alive_hint) {
  const std::string connection =
      keep_alive_hint.empty() ? "Connection: close\r\n" : fmt::format("Keep-Alive: {}\r\n", keep_alive_hint);
  return fmt::format(
      "HTTP/1.1 200 OK\r\nServer: tern\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
      "Transfer-Encoding: chunked\r\nx-request-id: {}\r\n{}\r\n",
      request_id, connection);
}

// A client-chosen request id is echoed only if it is a plain token (it goes back into a header and the log).
bool usable_request_id(std::string_view id) {
  if (id.empty() || id.size() > 128) return false;
  for (char c : id) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.' || c == ':')) return false;
  }
  return true;
}

}  // namespace

HttpSession::HttpSession(net::ip::tcp::socket socket, HttpServer& server)
    : stream_(std::move(socket)), body_deadline_(stream_.get_executor()), server_(server) {
  server_.metrics().connection_opened();
}

HttpSession::~HttpSession() {
  // Engine requests still running hold a reference to this session, so none can be left here; the exchange
  // count is all that may need settling.
  end_exchange();
  server_.connections().remove(this);
  server_.metrics().connection_closed();
}

void HttpSession::start() {
  server_.connections().add(shared_from_this());
  net::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->read_header(); });
}

void HttpSession::close_if_idle() {
  net::post(stream_.get_executor(), [self = shared_from_this()] {
    if (self->in_exchange_ || self->closed_ || self->lingering_) return;
    // The pending head read goes on as the linger's read (see on_header): the client sees our FIN, not a reset.
    self->lingering_ = true;
    beast::error_code ec;
    self->stream_.socket().shutdown(net::ip::tcp::socket::shutdown_send, ec);
    if (ec) return self->close();
    self->stream_.expires_after(kLingerTime);
  });
}

void HttpSession::abort() {
  net::post(stream_.get_executor(), [self = shared_from_this()] {
    if (self->response_ && !self->closed_) return self->abort_generation();
    self->cancel_generation("the server is shutting down");
    self->close();
  });
}

void HttpSession::read_header() {
  if (closed_) return;
  parser_.emplace();
  parser_->header_limit(kMaxHeaderBytes);
  parser_->body_limit(server_.config().max_body_bytes);
  stream_.expires_after(server_.config().header_timeout);
  http::async_read_header(stream_, buffer_, *parser_,
                          [self = shared_from_this()](beast::error_code ec, size_t) { self->on_header(ec); });
}

void HttpSession::on_header(beast::error_code ec) {
  if (closed_) return;
  if (lingering_) {
    if (ec) return close();
    discard_.resize(64 * 1024);
    return discard_until_eof();
  }
  if (ec == beast::error::timeout || ec == http::error::end_of_stream || ec == net::error::eof ||
      ec == net::error::operation_aborted || ec == net::error::connection_reset) {
    close();
    return;
  }
  begin_exchange();
  const auto& head = parser_->get();
  method_ = std::string(head.method_string());
  target_ = std::string(head.target());
  const std::string client_id(head["x-request-id"]);
  request_id_ = usable_request_id(client_id) ? std::string(client_id) : random_hex_id();
  keep_alive_ = head.keep_alive();
  if (ec == http::error::body_limit) {
    send_reply(HttpReply::error(ApiError(413, fmt::format("the request body exceeds the limit of {} bytes",
                                                          server_.config().max_body_bytes))),
               true);
    return;
  }
  if (ec == http::error::header_limit) {
    send_reply({431, "application/json",
                ApiError(431, fmt::format("the request head exceeds {} bytes", kMaxHeaderBytes)).to_json().dump()},
               true);
    return;
  }
  if (ec) {
    send_reply(HttpReply::error(ApiError(400, fmt::format("malformed HTTP request: {}", ec.message()))), true);
    return;
  }
  if (auto error = request_head_error(head)) {
    send_reply(HttpReply::error(ApiError(400, *error)), true);
    return;
  }
  if (server_.connections().draining()) {
    send_reply(HttpReply::error(ApiError(503, "the server is shutting down", std::nullopt, "server_shutting_down")),
               true);
    return;
  }
  if (beast::iequals(head[http::field::expect], "100-continue")) {
    auto interim = std::make_shared<std::string>("HTTP/1.1 100 Continue\r\n\r\n");
    net::async_write(stream_, net::buffer(*interim),
                     [self = shared_from_this(), interim](beast::error_code write_ec, size_t) {
                       if (write_ec) return self->close();
                       self->read_body();
                     });
    return;
  }
  read_body();
}

void HttpSession::read_body() {
  stream_.expires_never();
  body_timed_out_ = false;
  body_deadline_.expires_after(server_.config().header_timeout);
  body_deadline_.async_wait([self = shared_from_this()](beast::error_code ec) {
    if (ec || self->closed_) return;
    self->body_timed_out_ = true;
    beast::error_code ignored;
    self->stream_.socket().cancel(ignored);  // the read ends with operation_aborted; on_body answers 408
  });
  http::async_read(stream_, buffer_, *parser_,
                   [self = shared_from_this()](beast::error_code ec, size_t) { self->on_body(ec); });
}

void HttpSession::on_body(beast::error_code ec) {
  body_deadline_.cancel();
  if (closed_) return;
  if (ec == net::error::operation_aborted && body_timed_out_) {
    const auto seconds = std::chrono::duration<double>(server_.config().header_timeout).count();
    send_reply(HttpReply::error(ApiError(408, fmt::format("the request body did not arrive within {:g} s", seconds),
                                         std::nullopt, "request_timeout")),
               true);
    return;
  }
  if (ec == http::error::body_limit) {
    send_reply(HttpReply::error(ApiError(413, fmt::format("the request body exceeds the limit of {} bytes",
                                                          server_.config().max_body_bytes))),
               true);
    return;
  }
  if (ec.category() == http::make_error_code(http::error::partial_message).category()) {
    // A malformed body, or a client that shut its side of the connection down before the body was complete: it
    // may still read, so it is told (if it cannot, the write fails and the connection closes).
    const std::string why = ec == http::error::partial_message
                                ? "the client ended the connection before the request body was complete"
                                : fmt::format("malformed HTTP request body: {}", ec.message());
    send_reply(HttpReply::error(ApiError(400, why)), true);
    return;
  }
  if (ec) {
    close();  // gone mid-body: nobody to answer
    return;
  }
  dispatch();
}

void HttpSession::dispatch() {
  auto message = parser_->release();
  ApiRequest request;
  request.method = std::string(message.method_string());
  const auto query = target_.find('?');
  request.path = query == std::string::npos ? target_ : target_.substr(0, query);
  request.body = std::move(message.body());
  request.authorization = std::string(message[http::field::authorization]);
  request.request_id = request_id_;
  stream_.expires_never();
  if (OpenAiApi::is_cheap(request)) {
    deliver(server_.api().handle(request));
    return;
  }
  net::post(server_.workers(), [self = shared_from_this(), request = std::move(request)]() mutable {
    ApiResult result = self->server_.api().handle(request);
    net::post(self->stream_.get_executor(),
              [self, result = std::move(result)]() mutable { self->deliver(std::move(result)); });
  });
}

void HttpSession::deliver(ApiResult result) {
  if (closed_) return;
  if (auto* reply = std::get_if<HttpReply>(&result)) {
    send_reply(std::move(*reply));
  } else {
    start_generation(std::move(std::get<PreparedGeneration>(result)));
  }
}

void HttpSession::send_reply(HttpReply reply, bool close_after) {
  status_ = reply.status;
  close_after = close_after || !keep_alive_ || server_.connections().draining();
  reply_.emplace(static_cast<http::status>(reply.status), 11);
  reply_->set(http::field::server, "tern");
  reply_->set(http::field::content_type, reply.content_type);
  reply_->set("x-request-id", request_id_);
  reply_->keep_alive(!close_after);
  if (!close_after) reply_->set(http::field::keep_alive, keep_alive_hint());
  reply_->body() = std::move(reply.body);
  reply_->prepare_payload();
  // Recorded before the reply is written: a client that reads its answer and then asks /metrics sees it counted.
  log_exchange();
  stream_.expires_after(server_.config().write_timeout);
  http::async_write(stream_, *reply_, [self = shared_from_this(), close_after](beast::error_code ec, size_t) {
    self->on_reply_written(ec, close_after);
  });
}

void HttpSession::on_reply_written(beast::error_code ec, bool close_after) {
  reply_.reset();
  if (ec) {
    log_exchange();
    end_exchange();
    return close();
  }
  finish_exchange(close_after);
}

void HttpSession::start_generation(PreparedGeneration generation) {
  ++generation_;
  was_generation_ = true;
  engine_ = generation.engine;
  response_ = std::move(generation.response);
  streaming_ = response_->streaming();
  stream_complete_ = false;
  engine_request_ids_.clear();
  prompt_finished_.assign(generation.requests.size(), false);
  num_unfinished_ = generation.requests.size();
  first_output_at_.reset();
  inter_token_latencies_s_.clear();
  finish_reason_.reset();
  submitted_at_ = Clock::now();
  last_output_at_ = submitted_at_;
  for (size_t i = 0; i < generation.requests.size(); ++i) {
    auto sink = [self = shared_from_this(), id = generation_, i](RequestOutput output) {
      const auto at = Clock::now();
      net::post(self->stream_.get_executor(), [self, id, i, at, output = std::move(output)]() mutable {
        self->on_engine_output(id, i, std::move(output), at);
      });
    };
    try {
      engine_request_ids_.push_back(engine_->submit(std::move(generation.requests[i]), std::move(sink)));
    } catch (const Error& e) {
      for (uint64_t id : engine_request_ids_) engine_->cancel(id);
      ++generation_;  // the cancelled requests' outputs are not this exchange's any more
      response_.reset();
      was_generation_ = false;
      send_reply(HttpReply::error(generation.rejection(e, i)));
      return;
    }
  }
  if (streaming_) {
    pending_bytes_ = stream_header(request_id_, keep_alive_ && !server_.connections().draining() ? keep_alive_hint() : "");
    status_ = 200;
    queue_stream_bytes(response_->start());
    write_stream();
  }
  watch_for_disconnect();
}

void HttpSession::on_engine_output(uint64_t generation, size_t prompt_index, RequestOutput output,
                                   Clock::time_point at) {
  if (closed_ || generation != generation_ || !response_) return;
  if (!output.token_ids.empty()) {
    if (!first_output_at_) {
      first_output_at_ = at;
    } else {
      inter_token_latencies_s_.push_back(seconds_between(last_output_at_, at));
    }
    last_output_at_ = at;
  }
  if (output.finish_reason && (!finish_reason_ || output.index == 0)) finish_reason_ = output.finish_reason;
  const bool finished = output.request_finished;
  const std::string bytes = response_->on_output(prompt_index, output);
  if (streaming_) queue_stream_bytes(bytes);
  if (finished && !prompt_finished_[prompt_index]) {
    prompt_finished_[prompt_index] = true;
    --num_unfinished_;
  }
  if (num_unfinished_ == 0) {
    engine_done_at_ = at;
    finish_generation();
  } else if (streaming_) {
    write_stream();
  }
}

void HttpSession::finish_generation() { end_response(response_->finish()); }

void HttpSession::abort_generation() {
  for (size_t i = 0; i < engine_request_ids_.size(); ++i) {
    if (!prompt_finished_[i]) engine_->cancel(engine_request_ids_[i]);
  }
  ++generation_;  // the cancelled requests' last outputs are not this exchange's any more
  server_.metrics().count_cancelled();
  if (server_.config().log_requests) {
    std::fprintf(stderr, "tern: request %s cut short: the server is shutting down\n", request_id_.c_str());
  }
  finish_reason_ = FinishReason::kAbort;
  keep_alive_ = false;
  end_response(response_->abort());
}

void HttpSession::end_response(HttpReply reply) {
  usage_ = response_->usage();
  response_.reset();
  engine_request_ids_.clear();
  if (!streaming_) {
    send_reply(std::move(reply));
    return;
  }
  queue_stream_bytes(reply.body);
  pending_bytes_ += "0\r\n\r\n";
  stream_complete_ = true;
  log_exchange();  // before the last bytes go out, as for a reply
  write_stream();
}

void HttpSession::cancel_generation(const char* why) {
  if (!response_) return;
  for (size_t i = 0; i < engine_request_ids_.size(); ++i) {
    if (!prompt_finished_[i]) engine_->cancel(engine_request_ids_[i]);
  }
  server_.metrics().count_cancelled();
  if (server_.config().log_requests) {
    std::fprintf(stderr, "tern: request %s cancelled: %s\n", request_id_.c_str(), why);
  }
  response_.reset();
  ++generation_;
  status_ = 499;  // nginx's "client closed request", for the log
  log_exchange();
  end_exchange();
}

void HttpSession::watch_for_disconnect() {
  stream_.socket().async_wait(net::ip::tcp::socket::wait_read,
                              [self = shared_from_this(), id = generation_](beast::error_code ec) {
                                if (self->closed_ || id != self->generation_ || !self->response_) return;
                                if (ec) {
                                  self->cancel_generation("connection error");
                                  return self->close();
                                }
                                char byte;
                                const ssize_t n = ::recv(self->stream_.socket().native_handle(), &byte, 1,
                                                         MSG_PEEK | MSG_DONTWAIT);
                                if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
                                  self->cancel_generation("the client disconnected");
                                  return self->close();
                                }
                                // n > 0: a pipelined request waits; it is read after this response.
                                if (n < 0) self->watch_for_disconnect();
                              });
}

void HttpSession::queue_stream_bytes(const std::string& bytes) {
  if (bytes.empty()) return;
  pending_bytes_ += chunk_frame(bytes);
  if (pending_bytes_.size() > server_.config().max_buffered_stream_bytes) {
    cancel_generation("the client is not reading the stream");
    close();
  }
}

void HttpSession::write_stream() {
  if (closed_ || writing_ || pending_bytes_.empty()) return;
  writing_bytes_.swap(pending_bytes_);
  pending_bytes_.clear();
  writing_ = true;
  stream_.expires_after(server_.config().write_timeout);
  net::async_write(stream_, net::buffer(writing_bytes_),
                   [self = shared_from_this()](beast::error_code ec, size_t) { self->on_stream_written(ec); });
}

void HttpSession::on_stream_written(beast::error_code ec) {
  writing_ = false;
  writing_bytes_.clear();
  if (closed_) return;
  if (ec) {
    cancel_generation("the client disconnected");
    return close();
  }
  if (!pending_bytes_.empty()) return write_stream();
  if (!stream_complete_) {
    stream_.expires_never();
    return;
  }
  stream_complete_ = false;
  finish_exchange(!keep_alive_);
}

// Tells clients how long an idle connection stays open, so that they stop reusing it before we close it.
std::string HttpSession::keep_alive_hint() const {
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(server_.config().header_timeout).count();
  return fmt::format("timeout={}", std::max<int64_t>(1, seconds));
}

void HttpSession::begin_exchange() {
  received_at_ = Clock::now();
  status_ = 0;
  was_generation_ = false;
  usage_ = {};
  logged_ = false;
  if (in_exchange_) return;  // a pipelined request, counted as in flight since the previous response
  in_exchange_ = true;
  server_.connections().exchange_started();
}

void HttpSession::end_exchange() {
  if (!in_exchange_) return;
  in_exchange_ = false;
  server_.connections().exchange_ended();
}

void HttpSession::log_exchange() {
  if (!in_exchange_ || logged_) return;
  logged_ = true;
  const auto now = Clock::now();
  const double latency_s = seconds_between(received_at_, now);
  server_.metrics().count_response(status_);
  if (!was_generation_) {
    if (server_.config().log_requests) {
      std::fprintf(stderr, "tern: request %s %s %s %d latency_ms=%.1f\n", request_id_.c_str(), method_.c_str(),
                   target_.c_str(), status_, latency_s * 1e3);
    }
    return;
  }
  const bool completed = status_ == 200 && usage_.prompt_tokens > 0;
  const double engine_s = completed ? seconds_between(submitted_at_, engine_done_at_) : 0.0;
  if (completed) {
    RequestTimings timings;
    timings.time_to_first_token_s = first_output_at_ ? seconds_between(received_at_, *first_output_at_) : 0.0;
    timings.inter_token_latencies_s = inter_token_latencies_s_;
    timings.e2e_latency_s = latency_s;
    timings.server_overhead_s = latency_s - engine_s;
    server_.metrics().observe_request(timings, usage_, finish_reason_);
  }
  if (server_.config().log_requests) {
    std::fprintf(stderr,
                 "tern: request %s %s %s %d prompt_tokens=%d cached_tokens=%d completion_tokens=%d latency_ms=%.1f "
                 "engine_ms=%.1f overhead_ms=%.2f\n",
                 request_id_.c_str(), method_.c_str(), target_.c_str(), status_, usage_.prompt_tokens,
                 usage_.cached_tokens, usage_.completion_tokens, latency_s * 1e3, engine_s * 1e3,
                 completed ? (latency_s - engine_s) * 1e3 : 0.0);
  }
}

void HttpSession::finish_exchange(bool close_after) {
  log_exchange();
  if (close_after) {
    end_exchange();
    return linger_and_close();
  }
  // A pipelined request already received stays counted as in flight, so that a drain waits for its answer (a 503
  // if the drain has begun) instead of cutting the connection under it.
  const bool pipelined = buffer_.size() > 0;
  if (!pipelined) end_exchange();
  if (closed_) return;
  if (server_.connections().draining() && !pipelined) return linger_and_close();
  read_header();
}

void HttpSession::linger_and_close() {
  if (closed_ || lingering_) return;
  lingering_ = true;
  beast::error_code ec;
  stream_.socket().shutdown(net::ip::tcp::socket::shutdown_send, ec);
  if (ec) return close();
  discard_.resize(64 * 1024);
  stream_.expires_after(kLingerTime);  // one deadline for the whole linger: the reads below do not renew it
  discard_until_eof();
}

void HttpSession::discard_until_eof() {
  stream_.async_read_some(net::buffer(discard_), [self = shared_from_this()](beast::error_code ec, size_t) {
    if (ec) return self->close();
    self->discard_until_eof();
  });
}

void HttpSession::close() {
  if (closed_) return;
  closed_ = true;
  body_deadline_.cancel();
  if (response_) cancel_generation("the connection closed");
  end_exchange();
  beast::error_code ec;
  stream_.socket().shutdown(net::ip::tcp::socket::shutdown_both, ec);
  stream_.close();
}

}  // namespace tern::server
