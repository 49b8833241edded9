#include "gateway/upstream_connection_pool.h"

#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/write.hpp>
#include <optional>
#include <thread>
#include <vector>

namespace tern::gateway {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using namespace std::chrono_literals;

// Real loopback connections: an acceptor, and the accepted end of each connection to see what the pool did.
class UpstreamConnectionPoolTest : public ::testing::Test {
 protected:
  UpstreamConnectionPoolTest() : acceptor_(io_, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)) {}

  // A connected client socket; its peer is kept in peers_.
  tcp::socket connect() {
    tcp::socket client(io_);
    client.connect(acceptor_.local_endpoint());
    peers_.push_back(acceptor_.accept());
    return client;
  }

  // Whether the peer of connection `i` saw it closed (EOF), read without blocking the test for long.
  bool peer_sees_close(size_t i) {
    tcp::socket& peer = peers_.at(i);
    peer.non_blocking(true);
    char byte;
    for (int attempt = 0; attempt < 200; ++attempt) {
      boost::system::error_code ec;
      peer.read_some(asio::buffer(&byte, 1), ec);
      if (ec == asio::error::eof || ec == asio::error::connection_reset) return true;
      if (ec != asio::error::would_block) return false;
      std::this_thread::sleep_for(1ms);
    }
    return false;
  }

  asio::io_context io_;
  tcp::acceptor acceptor_;
  std::vector<tcp::socket> peers_;
  const std::string url_ = "http://127.0.0.1:1";
};

TEST_F(UpstreamConnectionPoolTest, HandsBackTheNewestIdleConnectionOnTheTakersExecutor) {
  UpstreamConnectionPool pool({});
  const auto t0 = UpstreamConnectionPool::Clock::now();
  EXPECT_FALSE(pool.take(url_, io_.get_executor(), t0).has_value());
  pool.give_back(url_, connect(), t0);
  pool.give_back(url_, connect(), t0 + 1s);
  EXPECT_EQ(pool.num_idle(url_), 2u);
  EXPECT_EQ(pool.num_idle("http://other:1"), 0u);

  auto strand = asio::make_strand(io_);
  std::optional<tcp::socket> taken = pool.take(url_, strand, t0 + 2s);
  ASSERT_TRUE(taken.has_value());
  EXPECT_TRUE(taken->get_executor() == asio::any_io_executor(strand));
  EXPECT_EQ(pool.num_idle(url_), 1u);
  // The newest is the second connection: what the client sends reaches peer 1.
  asio::write(*taken, asio::buffer("x", 1));
  char byte = 0;
  asio::read(peers_.at(1), asio::buffer(&byte, 1));
  EXPECT_EQ(byte, 'x');
  EXPECT_EQ(pool.stats().connections_reused, 1);
  EXPECT_EQ(pool.stats().idle_connections, 1);
}

TEST_F(UpstreamConnectionPoolTest, ClosesConnectionsIdleTooLongAndBeyondTheBound) {
  UpstreamConnectionPool pool({.max_idle_per_replica = 2, .max_idle_age = 10s});
  const auto t0 = UpstreamConnectionPool::Clock::now();
  pool.give_back(url_, connect(), t0);
  pool.give_back(url_, connect(), t0 + 5s);
  pool.give_back(url_, connect(), t0 + 6s);  // a third: the oldest goes
  EXPECT_EQ(pool.num_idle(url_), 2u);
  EXPECT_TRUE(peer_sees_close(0));
  EXPECT_FALSE(peer_sees_close(1));

  pool.close_expired(t0 + 15500ms);  // connection 1 idle 10.5 s, connection 2 idle 9.5 s
  EXPECT_EQ(pool.num_idle(url_), 1u);
  EXPECT_TRUE(peer_sees_close(1));
  EXPECT_FALSE(peer_sees_close(2));

  // take() skips (and closes) what has expired even between sweeps.
  EXPECT_FALSE(pool.take(url_, io_.get_executor(), t0 + 17s).has_value());
  EXPECT_TRUE(peer_sees_close(2));
  EXPECT_EQ(pool.stats().connections_reused, 0);
}

TEST_F(UpstreamConnectionPoolTest, ClosingAReplicasConnectionsLeavesOthersAlone) {
  UpstreamConnectionPool pool({});
  pool.give_back(url_, connect());
  pool.give_back("http://127.0.0.1:2", connect());
  pool.close_all(url_);
  EXPECT_EQ(pool.num_idle(url_), 0u);
  EXPECT_TRUE(peer_sees_close(0));
  EXPECT_EQ(pool.num_idle("http://127.0.0.1:2"), 1u);
  EXPECT_FALSE(peer_sees_close(1));
  pool.close_all();
  EXPECT_TRUE(peer_sees_close(1));
  EXPECT_EQ(pool.stats().idle_connections, 0);
}

TEST_F(UpstreamConnectionPoolTest, CountsOpenedConnectionsAndStaleRetries) {
  UpstreamConnectionPool pool({});
  pool.count_opened();
  pool.count_opened();
  pool.count_stale_retry();
  const UpstreamPoolStats stats = pool.stats();
  EXPECT_EQ(stats.connections_opened, 2);
  EXPECT_EQ(stats.stale_connection_retries, 1);
}

}  // namespace
}  // namespace tern::gateway
