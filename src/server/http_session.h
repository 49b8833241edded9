#pragma once
// One client connection: reads requests one at a time (keep-alive), hands them to the API on a worker thread,
// and writes the reply, or submits the generation to the engine and streams its outputs as they arrive.
// Every handler runs on the connection's strand; engine outputs are posted there from the engine thread.
// A client that goes away (EOF or a failed write) cancels its engine requests at once.
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "server/openai_api.h"

namespace tern::server {

class HttpServer;

class HttpSession : public std::enable_shared_from_this<HttpSession> {
 public:
  HttpSession(boost::asio::ip::tcp::socket socket, HttpServer& server);
  ~HttpSession();

  void start();
  // Thread-safe; both post to the strand. Idle: waiting for (or partway through) a request head.
  void close_if_idle();
  // Closes the connection; a generation in flight is cancelled and its response ended first (abort_generation).
  void abort();

 private:
  using Clock = std::chrono::steady_clock;
  using Parser = boost::beast::http::request_parser<boost::beast::http::string_body>;

  void read_header();
  void on_header(boost::beast::error_code ec);
  void read_body();
  void on_body(boost::beast::error_code ec);
  void dispatch();
  void deliver(ApiResult result);

  void send_reply(HttpReply reply, bool close_after = false);
  void on_reply_written(boost::beast::error_code ec, bool close_after);

  void start_generation(PreparedGeneration generation);
  void on_engine_output(uint64_t generation, size_t prompt_index, RequestOutput output, Clock::time_point at);
  void finish_generation();
  // A drain that ran out of time: cancels the generation and still ends its response (GenerationResponse::abort),
  // so that the client can tell a cut-short stream from a broken connection; then the connection closes.
  void abort_generation();
  // Sends what ends the generation's response: the whole reply, or the last stream bytes and chunk.
  void end_response(HttpReply reply);
  void cancel_generation(const char* why);
  void watch_for_disconnect();
  void queue_stream_bytes(const std::string& bytes);
  void write_stream();
  void on_stream_written(boost::beast::error_code ec);

  std::string keep_alive_hint() const;
  void begin_exchange();
  void end_exchange();
  void log_exchange();
  // After a response: the next request on this connection, or a graceful close.
  void finish_exchange(bool close_after);
  // Half-closes and discards what the client still sends for a moment, so it reads our reply before a reset.
  void linger_and_close();
  void discard_until_eof();
  void close();

  boost::beast::tcp_stream stream_;
  // The body's deadline is kept apart from the stream's, which closes the socket when it expires: a client that
  // stalls mid-body is answered 408 first.
  boost::asio::steady_timer body_deadline_;
  bool body_timed_out_ = false;
  boost::beast::flat_buffer buffer_;
  std::optional<Parser> parser_;
  HttpServer& server_;
  bool closed_ = false;
  bool lingering_ = false;  // our side is shut; reading only to discard until the client closes

  // The exchange in progress.
  bool in_exchange_ = false;
  bool logged_ = false;  // the exchange's metrics and log line are recorded (once)
  std::string request_id_;
  std::string method_;
  std::string target_;
  bool keep_alive_ = true;
  int status_ = 0;
  Clock::time_point received_at_;

  // Its generation, if it is one.
  uint64_t generation_ = 0;  // numbers generations, so late outputs of an earlier one are ignored
  Engine* engine_ = nullptr;
  std::unique_ptr<GenerationResponse> response_;
  std::vector<uint64_t> engine_request_ids_;
  std::vector<bool> prompt_finished_;
  size_t num_unfinished_ = 0;
  bool streaming_ = false;
  bool stream_complete_ = false;  // the last bytes are queued
  std::string pending_bytes_;     // queued, not yet written
  std::string writing_bytes_;     // being written
  bool writing_ = false;
  Clock::time_point submitted_at_;
  std::optional<Clock::time_point> first_output_at_;
  Clock::time_point last_output_at_;
  Clock::time_point engine_done_at_;
  std::vector<double> inter_token_latencies_s_;
  std::optional<FinishReason> finish_reason_;
  Usage usage_;
  bool was_generation_ = false;
  std::optional<boost::beast::http::response<boost::beast::http::string_body>> reply_;
  std::vector<char> discard_;  // linger_and_close's sink
};

}  // namespace tern::server
