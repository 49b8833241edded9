#include "disagg/tcp_kv_transport.h"

#include <array>
#include <atomic>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <cstdio>
#include <list>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "core/error.h"
#include "engine/engine.h"

namespace tern::disagg {

namespace {

namespace asio = boost::asio;
using asio::ip::tcp;

constexpr uint32_t kMessageMagic = 0x4D56'4B54;  // "TKVM" little-endian
constexpr uint32_t kMaxPromptTokens = 1u << 24;
constexpr uint64_t kMaxPayloadBytes = 1ull << 36;

template <typename T>
void append(std::vector<uint8_t>& out, const T& value) {
  const auto* bytes = reinterpret_cast<const uint8_t*>(&value);
  out.insert(out.end(), bytes, bytes + sizeof(T));
}

template <typename T>
T read_value(tcp::socket& socket) {
  T value{};
  asio::read(socket, asio::buffer(&value, sizeof(T)));
  return value;
}

// "host:port" -> (host, port); throws naming the endpoint.
std::pair<std::string, std::string> split_endpoint(const std::string& endpoint) {
  const size_t colon = endpoint.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == endpoint.size()) {
    fail("KV transfer endpoint '{}': expected host:port", endpoint);
  }
  return {endpoint.substr(0, colon), endpoint.substr(colon + 1)};
}

// Blocking in its interface, asynchronous inside: each operation runs on the sender's own io_context for at most
// the timeout (Asio's synchronous calls cannot time out).
class TcpKvSender final : public KvSender {
 public:
  TcpKvSender(std::string endpoint, std::chrono::milliseconds timeout)
      : endpoint_(std::move(endpoint)), timeout_(timeout), socket_(io_) {
    const auto [host, port] = split_endpoint(endpoint_);
    try {
      tcp::resolver resolver(io_);
      const auto endpoints = resolver.resolve(host, port);
      run([&](auto done) { asio::async_connect(socket_, endpoints, [done](auto ec, const auto&) { done(ec); }); },
          "connecting");
      socket_.set_option(tcp::no_delay(true));
    } catch (const boost::system::system_error& e) {
      fail("KV transfer to {}: cannot connect: {}", endpoint_, e.what());
    }
  }

  void send(std::span<const int32_t> prompt, int32_t first_block, std::span<const uint8_t> blocks) override {
    std::vector<uint8_t> head;
    append(head, kMessageMagic);
    append(head, static_cast<uint32_t>(prompt.size()));
    head.insert(head.end(), reinterpret_cast<const uint8_t*>(prompt.data()),
                reinterpret_cast<const uint8_t*>(prompt.data() + prompt.size()));
    append(head, first_block);
    append(head, static_cast<uint64_t>(blocks.size()));
    try {
      const std::array<asio::const_buffer, 2> buffers{asio::buffer(head), asio::buffer(blocks.data(), blocks.size())};
      run([&](auto done) { asio::async_write(socket_, buffers, [done](auto ec, size_t) { done(ec); }); },
          "sending a chunk");
    } catch (const boost::system::system_error& e) {
      fail("KV transfer to {}: sending a chunk failed: {}", endpoint_, e.what());
    }
    ++num_unanswered_;
  }

  int64_t finish() override {
    int64_t imported = 0;
    try {
      for (; num_unanswered_ > 0; --num_unanswered_) {
        const auto count = read<int32_t>();
        if (count < 0) {
          const auto length = std::min<uint32_t>(read<uint32_t>(), 1u << 16);
          std::string message(length, '\0');
          read_into(asio::buffer(message));
          fail("KV transfer to {}: the decode instance refused a chunk: {}", endpoint_, message);
        }
        imported += count;
      }
    } catch (const boost::system::system_error& e) {
      fail("KV transfer to {}: no answer from the decode instance: {}", endpoint_, e.what());
    }
    return imported;
  }

 private:
  // Starts an operation with a completion callback `done(error_code)` and runs it for at most the timeout; throws
  // tern::Error when it timed out, boost::system::system_error when it failed.
  template <typename Start>
  void run(Start start, const char* what) {
    std::optional<boost::system::error_code> result;
    start([&result](boost::system::error_code ec) { result = ec; });
    io_.restart();
    io_.run_for(timeout_);
    if (!result) {
      socket_.close();  // cancels the operation; its handler still runs
      io_.restart();
      io_.run();
      fail("KV transfer to {}: {} timed out after {} ms", endpoint_, what, timeout_.count());
    }
    if (*result) throw boost::system::system_error(*result);
  }

  void read_into(asio::mutable_buffer buffer) {
    run([&](auto done) { asio::async_read(socket_, buffer, [done](auto ec, size_t) { done(ec); }); },
        "waiting for the decode instance's answer");
  }

  template <typename T>
  T read() {
    T value{};
    read_into(asio::buffer(&value, sizeof(T)));
    return value;
  }

  std::string endpoint_;
  std::chrono::milliseconds timeout_;
  asio::io_context io_;
  tcp::socket socket_;
  int num_unanswered_ = 0;
};

class TcpKvReceiver final : public KvReceiver {
 public:
  TcpKvReceiver(const std::string& host, uint16_t port, Engine& engine) : engine_(engine), acceptor_(io_) {
    try {
      const tcp::endpoint endpoint(asio::ip::make_address(host), port);
      acceptor_.open(endpoint.protocol());
      acceptor_.set_option(tcp::acceptor::reuse_address(true));
      acceptor_.bind(endpoint);
      acceptor_.listen();
    } catch (const boost::system::system_error& e) {
      fail("--kv-transfer-port: cannot listen on {}:{}: {}", host, port, e.what());
    }
    port_ = acceptor_.local_endpoint().port();
    accept();
    io_thread_ = std::thread([this] { io_.run(); });
  }

  ~TcpKvReceiver() override {
    io_.stop();
    io_thread_.join();
    std::lock_guard lock(mutex_);
    for (auto& connection : connections_) {
      boost::system::error_code ignored;
      connection.socket->shutdown(tcp::socket::shutdown_both, ignored);
    }
    for (auto& connection : connections_) connection.thread.join();
  }

  uint16_t port() const override { return port_; }
  int64_t num_imported_blocks() const override { return num_imported_.load(); }

 private:
  void accept() {
    acceptor_.async_accept([this](boost::system::error_code ec, tcp::socket socket) {
      if (ec) return;
      std::lock_guard lock(mutex_);
      // A connection per transfer: join the threads of those that ended, so a long-running server keeps none.
      for (auto it = connections_.begin(); it != connections_.end();) {
        if (*it->done) {
          it->thread.join();
          it = connections_.erase(it);
        } else {
          ++it;
        }
      }
      Connection& connection = connections_.emplace_back();
      connection.socket = std::make_shared<tcp::socket>(std::move(socket));
      connection.done = std::make_shared<std::atomic<bool>>(false);
      connection.thread = std::thread([this, socket = connection.socket, done = connection.done] {
        serve(*socket);
        *done = true;
      });
      accept();
    });
  }

  // One sender's chunks, in order, until it closes the connection.
  void serve(tcp::socket& socket) {
    try {
      while (true) {
        if (read_value<uint32_t>(socket) != kMessageMagic) return;  // not a KV transfer: drop the connection
        const auto num_tokens = read_value<uint32_t>(socket);
        if (num_tokens > kMaxPromptTokens) return;
        std::vector<int32_t> prompt(num_tokens);
        asio::read(socket, asio::buffer(prompt));
        const auto first_block = read_value<int32_t>(socket);
        const auto payload_bytes = read_value<uint64_t>(socket);
        if (payload_bytes > kMaxPayloadBytes) return;
        std::vector<uint8_t> payload(payload_bytes);
        asio::read(socket, asio::buffer(payload));
        std::vector<uint8_t> answer;
        try {
          const int32_t imported = engine_.import_prompt_kv(std::move(prompt), first_block, std::move(payload));
          num_imported_ += imported;
          append(answer, imported);
        } catch (const std::exception& e) {
          const std::string message = e.what();
          std::fprintf(stderr, "tern: KV transfer chunk refused: %s\n", message.c_str());
          append(answer, int32_t{-1});
          append(answer, static_cast<uint32_t>(message.size()));
          answer.insert(answer.end(), message.begin(), message.end());
        }
        asio::write(socket, asio::buffer(answer));
      }
    } catch (const boost::system::system_error&) {
      // The sender closed the connection (or the receiver is shutting down): nothing is owed to anyone.
    }
  }

  Engine& engine_;
  asio::io_context io_;
  tcp::acceptor acceptor_;
  uint16_t port_ = 0;
  std::atomic<int64_t> num_imported_{0};
  struct Connection {
    std::shared_ptr<tcp::socket> socket;
    std::shared_ptr<std::atomic<bool>> done;
    std::thread thread;
  };
  std::mutex mutex_;
  std::list<Connection> connections_;
  std::thread io_thread_;
};

}  // namespace

std::unique_ptr<KvSender> TcpKvTransport::connect(const std::string& endpoint) {
  return std::make_unique<TcpKvSender>(endpoint, timeout_);
}

std::unique_ptr<KvReceiver> TcpKvTransport::listen(const std::string& host, uint16_t port, Engine& engine) {
  return std::make_unique<TcpKvReceiver>(host, port, engine);
}

}  // namespace tern::disagg
