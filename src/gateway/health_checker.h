#pragma once
// Periodic health checks: GET /health on every replica each interval; a 200 within the timeout marks it healthy
// (re-admitting it if it was out), anything else marks it unhealthy. Connections also mark a replica unhealthy
// when a request fails on it, so a dead replica is skipped at once rather than at the next check.
// Checks carry the gateway's loop marker (kGatewayIdField): a replica URL that leads back to the gateway fails
// its checks and is never routed to.
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <string>

#include "gateway/replica_pool.h"

namespace tern::gateway {

class HealthChecker {
 public:
  HealthChecker(boost::asio::any_io_executor executor, ReplicaPool& pool, std::chrono::milliseconds interval,
                std::chrono::milliseconds timeout, std::string gateway_id);

  // Checks every replica now, then every interval, until stop().
  void start();
  void stop();
  // Checks one replica now (a replica just added need not wait for the next round).
  void check(const ReplicaAddress& address);

 private:
  void schedule();

  boost::asio::any_io_executor executor_;
  ReplicaPool& pool_;
  std::chrono::milliseconds interval_;
  std::chrono::milliseconds timeout_;
  std::string gateway_id_;
  boost::asio::steady_timer timer_;
};

}  // namespace tern::gateway
