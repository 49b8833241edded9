#include "disagg/kv_channel.h"

#include <algorithm>
#include <array>
#include <boost/asio/connect.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <cstdio>
#include <optional>

#include "core/error.h"

namespace tern::disagg {

namespace {

namespace asio = boost::asio;
using asio::ip::tcp;

constexpr uint32_t kMaxPromptTokens = 1u << 24;
constexpr uint64_t kMaxBodyBytes = 1ull << 36;

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

}  // namespace

KvChannelSender::KvChannelSender(std::string endpoint, std::chrono::milliseconds timeout)
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

void KvChannelSender::write(uint32_t kind, std::span<const int32_t> prompt, int32_t first_block,
                            std::span<const uint8_t> body) {
  std::vector<uint8_t> head;
  append(head, kind);
  append(head, static_cast<uint32_t>(prompt.size()));
  head.insert(head.end(), reinterpret_cast<const uint8_t*>(prompt.data()),
              reinterpret_cast<const uint8_t*>(prompt.data() + prompt.size()));
  append(head, first_block);
  append(head, static_cast<uint64_t>(body.size()));
  try {
    const std::array<asio::const_buffer, 2> buffers{asio::buffer(head), asio::buffer(body.data(), body.size())};
    run([&](auto done) { asio::async_write(socket_, buffers, [done](auto ec, size_t) { done(ec); }); },
        "sending a chunk");
  } catch (const boost::system::system_error& e) {
    fail("KV transfer to {}: sending a chunk failed: {}", endpoint_, e.what());
  }
  ++num_unanswered_;
}

int32_t KvChannelSender::read_answer() {
  if (num_unanswered_ == 0) fail("KV transfer to {}: no message awaits an answer", endpoint_);
  --num_unanswered_;
  try {
    int32_t count = 0;
    read_into(asio::buffer(&count, sizeof(count)));
    if (count >= 0) return count;
    uint32_t length = 0;
    read_into(asio::buffer(&length, sizeof(length)));
    std::string message(std::min<uint32_t>(length, 1u << 16), '\0');
    read_into(asio::buffer(message));
    throw KvMessageRefused(fmt::format("KV transfer to {}: the decode instance refused a chunk: {}", endpoint_, message));
  } catch (const boost::system::system_error& e) {
    fail("KV transfer to {}: no answer from the decode instance: {}", endpoint_, e.what());
  }
}

template <typename Start>
void KvChannelSender::run(Start start, const char* what) {
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

void KvChannelSender::read_into(asio::mutable_buffer buffer) {
  run([&](auto done) { asio::async_read(socket_, buffer, [done](auto ec, size_t) { done(ec); }); },
      "waiting for the decode instance's answer");
}

KvChannelListener::KvChannelListener(const std::string& host, uint16_t port, std::vector<uint32_t> kinds,
                                     std::function<Handler()> new_connection)
    : kinds_(std::move(kinds)), new_connection_(std::move(new_connection)), acceptor_(io_) {
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

KvChannelListener::~KvChannelListener() {
  io_.stop();
  io_thread_.join();
  std::lock_guard lock(mutex_);
  for (auto& connection : connections_) {
    boost::system::error_code ignored;
    connection.socket->shutdown(tcp::socket::shutdown_both, ignored);
  }
  for (auto& connection : connections_) connection.thread.join();
}

void KvChannelListener::accept() {
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

void KvChannelListener::serve(tcp::socket& socket) {
  const Handler handle = new_connection_();
  try {
    while (true) {
      KvChannelMessage message;
      message.kind = read_value<uint32_t>(socket);
      if (std::find(kinds_.begin(), kinds_.end(), message.kind) == kinds_.end()) return;  // not ours: drop it
      const auto num_tokens = read_value<uint32_t>(socket);
      if (num_tokens > kMaxPromptTokens) return;
      message.prompt.resize(num_tokens);
      asio::read(socket, asio::buffer(message.prompt));
      message.first_block = read_value<int32_t>(socket);
      const auto body_bytes = read_value<uint64_t>(socket);
      if (body_bytes > kMaxBodyBytes) return;
      message.body.resize(body_bytes);
      asio::read(socket, asio::buffer(message.body));
      std::vector<uint8_t> answer;
      try {
        const int32_t imported = handle(message);
        num_imported_ += imported;
        append(answer, imported);
      } catch (const std::exception& e) {
        const std::string error = e.what();
        std::fprintf(stderr, "tern: KV transfer chunk refused: %s\n", error.c_str());
        append(answer, int32_t{-1});
        append(answer, static_cast<uint32_t>(error.size()));
        answer.insert(answer.end(), error.begin(), error.end());
      }
      asio::write(socket, asio::buffer(answer));
    }
  } catch (const boost::system::system_error&) {
    // The sender closed the connection (or the receiver is shutting down): nothing is owed to anyone.
  }
}

}  // namespace tern::disagg
