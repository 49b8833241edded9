#include "gateway/upstream_connection_pool.h"

#include <unistd.h>

namespace tern::gateway {

UpstreamConnectionPool::UpstreamConnectionPool(UpstreamPoolLimits limits) : limits_(limits) {}

std::optional<UpstreamConnectionPool::Socket> UpstreamConnectionPool::take(
    const std::string& url, const boost::asio::any_io_executor& executor, Clock::time_point now) {
  std::lock_guard lock(mutex_);
  auto it = idle_.find(url);
  if (it == idle_.end()) return std::nullopt;
  std::deque<IdleConnection>& connections = it->second;
  while (!connections.empty()) {
    IdleConnection newest = std::move(connections.back());
    connections.pop_back();
    if (now - newest.idle_since > limits_.max_idle_age) continue;  // closed as it goes out of scope
    // The socket was opened on another connection's strand: its descriptor moves to a socket on the taker's.
    boost::system::error_code ec;
    const auto protocol = newest.socket.local_endpoint(ec).protocol();
    if (ec) continue;
    const Socket::native_handle_type descriptor = newest.socket.release(ec);
    if (ec) continue;
    Socket rebound(executor);
    rebound.assign(protocol, descriptor, ec);
    if (ec) {
      ::close(descriptor);
      continue;
    }
    ++stats_.connections_reused;
    return rebound;
  }
  return std::nullopt;
}

void UpstreamConnectionPool::give_back(const std::string& url, Socket socket, Clock::time_point now) {
  std::lock_guard lock(mutex_);
  std::deque<IdleConnection>& connections = idle_[url];
  connections.push_back({std::move(socket), now});
  while (connections.size() > limits_.max_idle_per_replica) connections.pop_front();
}

void UpstreamConnectionPool::close_expired(Clock::time_point now) {
  std::lock_guard lock(mutex_);
  for (auto it = idle_.begin(); it != idle_.end();) {
    std::deque<IdleConnection>& connections = it->second;
    while (!connections.empty() && now - connections.front().idle_since > limits_.max_idle_age) {
      connections.pop_front();
    }
    it = connections.empty() ? idle_.erase(it) : std::next(it);
  }
}

void UpstreamConnectionPool::close_all(const std::string& url) {
  std::lock_guard lock(mutex_);
  idle_.erase(url);
}

void UpstreamConnectionPool::close_all() {
  std::lock_guard lock(mutex_);
  idle_.clear();
}

void UpstreamConnectionPool::count_opened() {
  std::lock_guard lock(mutex_);
  ++stats_.connections_opened;
}

void UpstreamConnectionPool::count_stale_retry() {
  std::lock_guard lock(mutex_);
  ++stats_.stale_connection_retries;
}

UpstreamPoolStats UpstreamConnectionPool::stats() const {
  std::lock_guard lock(mutex_);
  UpstreamPoolStats stats = stats_;
  stats.idle_connections = 0;
  for (const auto& [url, connections] : idle_) stats.idle_connections += static_cast<int64_t>(connections.size());
  return stats;
}

size_t UpstreamConnectionPool::num_idle(const std::string& url) const {
  std::lock_guard lock(mutex_);
  auto it = idle_.find(url);
  return it == idle_.end() ? 0 : it->second.size();
}

}  // namespace tern::gateway
