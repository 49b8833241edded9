#pragma once
// The TCP connection every KV transport talks over: the prefill instance sends messages, the decode instance
// answers each with the number of blocks it imported, or with its error. What a message's body holds is the
// transport's business (the blocks themselves over TCP; where to find them in shared memory for the same-host
// transport). The sender writes messages without waiting for their answers, so the decode side imports early
// chunks while later ones are still being exported and sent, and bounds every wait (connect, each write, each
// answer) by a timeout.
//
// Message: u32 kind, u32 prompt length, prompt ids (i32 each), i32 first block, u64 body length, body.
// Answer: i32 blocks imported, or -1 then u32 length and an error message.
// Integers are little-endian (both ends are: x86-64 and aarch64).
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "disagg/kv_transport.h"

namespace tern::disagg {

// The decode instance answered a message with its error: the message is settled (the connection stays usable).
class KvMessageRefused : public Error {
 public:
  using Error::Error;
};

class KvChannelSender {
 public:
  // Connects to "host:port"; throws tern::Error naming the endpoint when it cannot within `timeout`.
  KvChannelSender(std::string endpoint, std::chrono::milliseconds timeout);

  const std::string& endpoint() const { return endpoint_; }
  void write(uint32_t kind, std::span<const int32_t> prompt, int32_t first_block, std::span<const uint8_t> body);
  // Messages written and not yet answered.
  int num_unanswered() const { return num_unanswered_; }
  // The next answer: blocks imported. Throws KvMessageRefused with the decode side's message when it refused the
  // message, tern::Error when no answer came within the timeout or the connection failed.
  int32_t read_answer();

 private:
  // Starts an operation with a completion callback `done(error_code)` and runs it for at most the timeout; throws
  // tern::Error when it timed out, boost::system::system_error when it failed.
  template <typename Start>
  void run(Start start, const char* what);
  void read_into(boost::asio::mutable_buffer buffer);

  std::string endpoint_;
  std::chrono::milliseconds timeout_;
  boost::asio::io_context io_;  // Asio's synchronous calls cannot time out: operations run here, bounded
  boost::asio::ip::tcp::socket socket_;
  int num_unanswered_ = 0;
};

struct KvChannelMessage {
  uint32_t kind = 0;
  std::vector<int32_t> prompt;
  int32_t first_block = 0;
  std::vector<uint8_t> body;
};

// Accepts connections on host:port, a thread for each, until destroyed; every message of a connection goes to
// that connection's handler, which returns the blocks it imported or throws (the error is the answer). A
// connection whose first bytes are not a message of a known kind is dropped.
class KvChannelListener final : public KvReceiver {
 public:
  using Handler = std::function<int32_t(KvChannelMessage&)>;
  KvChannelListener(const std::string& host, uint16_t port, std::vector<uint32_t> kinds,
                    std::function<Handler()> new_connection);
  ~KvChannelListener() override;

  uint16_t port() const override { return port_; }
  int64_t num_imported_blocks() const override { return num_imported_.load(); }

 private:
  void accept();
  void serve(boost::asio::ip::tcp::socket& socket);

  std::vector<uint32_t> kinds_;
  std::function<Handler()> new_connection_;
  boost::asio::io_context io_;
  boost::asio::ip::tcp::acceptor acceptor_;
  uint16_t port_ = 0;
  std::atomic<int64_t> num_imported_{0};
  struct Connection {
    std::shared_ptr<boost::asio::ip::tcp::socket> socket;
    std::shared_ptr<std::atomic<bool>> done;
    std::thread thread;
  };
  std::mutex mutex_;
  std::list<Connection> connections_;
  std::thread io_thread_;
};

}  // namespace tern::disagg
