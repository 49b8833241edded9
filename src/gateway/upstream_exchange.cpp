#include "gateway/upstream_exchange.h"

#include <boost/asio/ip/address.hpp>
#include <limits>
#include <vector>

#include "gateway/replica_admission.h"

namespace tern::gateway {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

namespace {

// How a connection the replica closed while it sat idle in the pool fails: the write or the head read meets the
// close before any response byte.
bool is_closed_by_peer(beast::error_code ec) {
  return ec == http::error::end_of_stream || ec == asio::error::eof || ec == asio::error::connection_reset ||
         ec == asio::error::broken_pipe;
}

}  // namespace

UpstreamExchange::UpstreamExchange(asio::any_io_executor executor, ReplicaAddress address, Request request,
                                   UpstreamTimeouts timeouts, UpstreamConnectionPool* pool)
    : address_(std::move(address)),
      request_(std::move(request)),
      timeouts_(timeouts),
      pool_(pool),
      resolver_(executor),
      stream_(executor) {}

void UpstreamExchange::start(HeadHandler on_head) {
  on_head_ = std::move(on_head);
  request_.set(http::field::host, std::string(address_.authority()));
  request_.keep_alive(pool_ != nullptr);
  request_.prepare_payload();
  if (pool_) {
    if (auto socket = pool_->take(address_.url, stream_.get_executor())) {
      stream_.socket() = std::move(*socket);
      reused_connection_ = true;
      return send();
    }
  }
  connect_fresh();
}

void UpstreamExchange::connect_fresh() {
  // A numeric host (the usual case) skips the resolver, which would cost a thread hop per request.
  beast::error_code ec;
  const asio::ip::address ip = asio::ip::make_address(address_.host, ec);
  if (!ec) {
    stream_.expires_after(timeouts_.connect);
    stream_.async_connect(tcp::endpoint(ip, static_cast<uint16_t>(std::stoi(address_.port))),
                          [self = shared_from_this()](beast::error_code ec) { self->on_connected(ec); });
    return;
  }
  resolver_.async_resolve(address_.host, address_.port,
                          [self = shared_from_this()](beast::error_code ec, tcp::resolver::results_type results) {
                            if (ec) return self->report_head(ec);
                            self->connect(results);
                          });
}

void UpstreamExchange::connect(const tcp::resolver::results_type& results) {
  // A name can resolve to what a replica URL may not name (a metadata service's link-local address; replica
  // addresses given as IP addresses were checked when admitted): checked on every resolution, since the name's
  // records can change after the replica was admitted.
  std::vector<tcp::endpoint> endpoints;
  for (const auto& result : results) {
    if (!is_forbidden_destination(result.endpoint().address())) endpoints.push_back(result.endpoint());
  }
  if (endpoints.empty()) return report_head(asio::error::access_denied);
  stream_.expires_after(timeouts_.connect);
  stream_.async_connect(endpoints, [self = shared_from_this()](beast::error_code ec, const tcp::endpoint&) {
    self->on_connected(ec);
  });
}

void UpstreamExchange::on_connected(beast::error_code ec) {
  if (ec) return report_head(ec);
  if (pool_) pool_->count_opened();
  stream_.socket().set_option(tcp::no_delay(true), ec);
  send();
}

void UpstreamExchange::send() {
  buffer_.clear();
  parser_.emplace();
  // No limit on what a replica sends. Not boost::none: Boost 1.74 compares a Content-Length against an empty
  // optional as "greater" and fails every response that announces its length.
  parser_->body_limit(std::numeric_limits<std::uint64_t>::max());
  stream_.expires_after(timeouts_.connect);
  http::async_write(stream_, request_, [self = shared_from_this()](beast::error_code ec, size_t) {
    self->on_written(ec);
  });
}

void UpstreamExchange::on_written(beast::error_code ec) {
  if (ec) return on_failed_before_response(ec);
  request_sent_at_ = std::chrono::steady_clock::now();
  if (timeouts_.response_head.count() > 0) {
    stream_.expires_after(timeouts_.response_head);
  } else {
    stream_.expires_never();
  }
  http::async_read_header(stream_, buffer_, *parser_, [self = shared_from_this()](beast::error_code ec, size_t) {
    self->stream_.expires_never();
    if (ec) return self->on_failed_before_response(ec);
    self->report_head(ec);
  });
}

void UpstreamExchange::on_failed_before_response(beast::error_code ec) {
  if (!reused_connection_ || !is_closed_by_peer(ec)) return report_head(ec);
  reused_connection_ = false;
  pool_->count_stale_retry();
  beast::error_code ignored;
  stream_.socket().close(ignored);
  connect_fresh();
}

void UpstreamExchange::report_head(beast::error_code ec) {
  // Moved out first: the handler usually owns this exchange's owner, which owns the exchange.
  HeadHandler on_head = std::move(on_head_);
  on_head(ec);
}

void UpstreamExchange::read_body(BodyHandler on_piece) {
  if (parser_->is_done()) return on_piece({}, {}, true);
  parser_->get().body().data = piece_.data();
  parser_->get().body().size = piece_.size();
  http::async_read_some(stream_, buffer_, *parser_,
                        [self = shared_from_this(), on_piece = std::move(on_piece)](beast::error_code ec, size_t) {
                          if (ec == http::error::need_buffer) ec = {};
                          const size_t num_bytes = self->piece_.size() - self->parser_->get().body().size;
                          on_piece(ec, std::string_view(self->piece_.data(), num_bytes), self->parser_->is_done());
                        });
}

void UpstreamExchange::finish() {
  // Bytes past the response's end would be taken for the next response's: such a connection is not reused.
  const bool reusable = pool_ && parser_ && parser_->is_done() && parser_->keep_alive() && buffer_.size() == 0 &&
                        stream_.socket().is_open();
  if (!reusable) return cancel();
  pool_->give_back(address_.url, stream_.release_socket());
}

void UpstreamExchange::cancel() {
  beast::error_code ignored;
  stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
  stream_.close();
}

}  // namespace tern::gateway
