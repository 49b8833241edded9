#pragma once
// Idle keep-alive connections to replicas, by replica URL, so that consecutive requests to one replica reuse a
// connection instead of paying a TCP handshake (and a socket in TIME_WAIT) each. A connection comes back only
// after a clean exchange (see UpstreamExchange::finish); the newest idle one is handed out first (the one least
// likely to have been closed by the replica meanwhile). Idle connections are bounded in number per replica and in
// age: they are closed past `max_idle_age`, kept below the tern server's own keep-alive timeout (its
// --header-timeout, 30 s by default) so that the gateway, not the replica, usually ends an idle connection.
// Thread-safe: connections of every I/O thread give and take; a taken socket is moved onto the taker's executor.
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <string>

namespace tern::gateway {

struct UpstreamPoolLimits {
  size_t max_idle_per_replica = 32;
  std::chrono::milliseconds max_idle_age{20'000};
};

// Counters since start, for /metrics.
struct UpstreamPoolStats {
  int64_t connections_opened = 0;
  int64_t connections_reused = 0;
  // Requests sent again on a fresh connection because the idle one they were sent on turned out to be closed.
  int64_t stale_connection_retries = 0;
  int64_t idle_connections = 0;  // now
};

class UpstreamConnectionPool {
 public:
  using Clock = std::chrono::steady_clock;
  using Socket = boost::asio::ip::tcp::socket;

  explicit UpstreamConnectionPool(UpstreamPoolLimits limits);

  // The newest idle connection to `url` not older than the age limit, now bound to `executor`; nullopt if none
  // (the caller then connects and reports it with count_opened).
  std::optional<Socket> take(const std::string& url, const boost::asio::any_io_executor& executor,
                             Clock::time_point now = Clock::now());
  // Keeps `socket` (open, no operation pending, its last response fully read) as idle; past the per-replica bound
  // the oldest idle connection is closed.
  void give_back(const std::string& url, Socket socket, Clock::time_point now = Clock::now());
  // Closes the idle connections older than the age limit.
  void close_expired(Clock::time_point now = Clock::now());
  // Closes every idle connection to `url` (the replica left the pool).
  void close_all(const std::string& url);
  // Closes every idle connection (shutdown).
  void close_all();

  void count_opened();
  void count_stale_retry();
  UpstreamPoolStats stats() const;
  size_t num_idle(const std::string& url) const;

 private:
  struct IdleConnection {
    Socket socket;
    Clock::time_point idle_since;
  };

  const UpstreamPoolLimits limits_;
  mutable std::mutex mutex_;
  std::map<std::string, std::deque<IdleConnection>> idle_;  // oldest first
  UpstreamPoolStats stats_;
};

}  // namespace tern::gateway
