#include "gateway/health_checker.h"

#include <boost/asio/strand.hpp>
#include <cstdio>

#include "gateway/upstream_exchange.h"

namespace tern::gateway {

namespace http = boost::beast::http;

HealthChecker::HealthChecker(boost::asio::any_io_executor executor, ReplicaPool& pool,
                             std::chrono::milliseconds interval, std::chrono::milliseconds timeout,
                             std::string gateway_id)
    : executor_(executor),
      pool_(pool),
      interval_(interval),
      timeout_(timeout),
      gateway_id_(std::move(gateway_id)),
      timer_(executor) {}

void HealthChecker::start() {
  for (const ReplicaAddress& address : pool_.addresses()) check(address);
  schedule();
}

void HealthChecker::stop() { timer_.cancel(); }

void HealthChecker::schedule() {
  timer_.expires_after(interval_);
  timer_.async_wait([this](boost::system::error_code ec) {
    if (ec) return;  // stopped
    for (const ReplicaAddress& address : pool_.addresses()) check(address);
    schedule();
  });
}

void HealthChecker::check(const ReplicaAddress& address) {
  UpstreamExchange::Request request{http::verb::get, "/health", 11};
  request.set(kGatewayIdField, gateway_id_);
  auto probe = std::make_shared<UpstreamExchange>(boost::asio::make_strand(executor_), address, std::move(request),
                                                  UpstreamTimeouts{timeout_, timeout_}, /*pool=*/nullptr);
  probe->start([this, probe](boost::beast::error_code ec) {
    const bool healthy = !ec && probe->head().result_int() == 200;
    probe->cancel();
    if (pool_.set_healthy(probe->address().url, healthy)) {
      std::fprintf(stderr, "tern gateway: replica %s is %s\n", probe->address().url.c_str(),
                   healthy ? "healthy" : "unhealthy");
    }
  });
}

}  // namespace tern::gateway
