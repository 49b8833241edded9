#pragma once
// How a front end (`tern serve`'s HTTP server, `tern gateway`) stops without cutting requests short: the first
// shutdown request stops accepting and closes idle connections, requests in flight finish, and past a timeout (or
// on a second shutdown request) every connection is closed. Sessions register here and mark each request from its
// arrival to its answer; every member is safe from any thread. `Session` has close_if_idle() and abort().
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace tern::server {

template <typename Session>
class ConnectionDrain {
 public:
  using StartSession = std::function<void(boost::asio::ip::tcp::socket)>;

  bool draining() const {
    std::lock_guard lock(mutex_);
    return shutdown_requested_;
  }
  void add(const std::shared_ptr<Session>& session) {
    std::lock_guard lock(mutex_);
    sessions_[session.get()] = session;
  }
  void remove(const Session* session) {
    {
      std::lock_guard lock(mutex_);
      sessions_.erase(session);
    }
    changed_.notify_all();
  }
  // A request received until its response is sent (or its connection closed): what a drain waits for.
  void exchange_started() {
    std::lock_guard lock(mutex_);
    ++num_exchanges_;
  }
  void exchange_ended() {
    {
      std::lock_guard lock(mutex_);
      --num_exchanges_;
    }
    changed_.notify_all();
  }

  // The first call starts draining; a later one forces the stop. On the acceptor's executor: closes idle sessions,
  // takes the connections the kernel completed but nobody accepted yet (their close would reset them; so their
  // requests get an answer, 503, and their clients a clean close) through `start_session`, and closes the acceptor.
  void begin_shutdown(boost::asio::io_context& io, boost::asio::ip::tcp::acceptor& acceptor, StartSession start_session) {
    {
      std::lock_guard lock(mutex_);
      if (shutdown_requested_) shutdown_forced_ = true;
      shutdown_requested_ = true;
    }
    changed_.notify_all();
    boost::asio::post(acceptor.get_executor(), [this, &io, &acceptor, start_session = std::move(start_session)] {
      if (!acceptor.is_open()) return;
      for (const auto& session : live_sessions()) session->close_if_idle();
      boost::system::error_code ec;
      acceptor.non_blocking(true, ec);
      while (!ec) {
        boost::asio::ip::tcp::socket socket(boost::asio::make_strand(io));
        acceptor.accept(socket, ec);
        if (!ec) start_session(std::move(socket));
      }
      acceptor.close(ec);
    });
  }

  // Blocks until begin_shutdown() has been called.
  void wait_for_shutdown_request() {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return shutdown_requested_; });
  }

  // Blocks until no exchange is in flight, `timeout` passes or the stop is forced; calls `report_cut(n)` when n
  // exchanges are still in flight then; closes every connection and waits briefly for the closes to complete (their
  // pending handlers hold the sessions, and let the peers see the connections close).
  void drain(std::chrono::milliseconds timeout, const std::function<void(int64_t)>& report_cut) {
    {
      std::unique_lock lock(mutex_);
      changed_.wait_for(lock, timeout, [&] { return num_exchanges_ == 0 || shutdown_forced_; });
      if (num_exchanges_ > 0) report_cut(num_exchanges_);
    }
    for (const auto& session : live_sessions()) session->abort();
    std::unique_lock lock(mutex_);
    changed_.wait_for(lock, kCloseTimeout, [&] { return sessions_.empty(); });
  }

 private:
  static constexpr auto kCloseTimeout = std::chrono::seconds(2);

  std::vector<std::shared_ptr<Session>> live_sessions() {
    std::lock_guard lock(mutex_);
    std::vector<std::shared_ptr<Session>> live;
    for (const auto& [pointer, weak] : sessions_) {
      if (auto session = weak.lock()) live.push_back(std::move(session));
    }
    return live;
  }

  mutable std::mutex mutex_;
  std::condition_variable changed_;
  bool shutdown_requested_ = false;
  bool shutdown_forced_ = false;
  int64_t num_exchanges_ = 0;
  std::unordered_map<const Session*, std::weak_ptr<Session>> sessions_;
};

}  // namespace tern::server
