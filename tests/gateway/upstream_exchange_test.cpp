#include "gateway/upstream_exchange.h"

#include <gtest/gtest.h>

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/write.hpp>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

namespace tern::gateway {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

// A replica that answers each request with the next scripted response, one connection at a time, on a thread of
// its own with blocking sockets; it counts the connections it accepted and saw closed by the gateway.
class ScriptedReplica {
 public:
  struct Step {
    std::string response;
    bool close_after = false;  // close the connection after the response, without saying so (an idle close)
  };

  explicit ScriptedReplica(std::deque<Step> script)
      : acceptor_(io_, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)), script_(std::move(script)) {
    thread_ = std::thread([this] { serve(); });
  }
  ~ScriptedReplica() {
    stopping_ = true;
    tcp::socket wake(io_);  // unblocks accept()
    boost::system::error_code ec;
    wake.connect(acceptor_.local_endpoint(), ec);
    thread_.join();
  }

  ReplicaAddress address() const {
    const std::string port = std::to_string(acceptor_.local_endpoint().port());
    return {"http://127.0.0.1:" + port, "127.0.0.1", port};
  }
  int num_accepted() const { return num_accepted_; }
  int num_closed_by_gateway() const { return num_closed_by_gateway_; }
  std::vector<std::string> request_heads() const {
    std::lock_guard lock(mutex_);
    return request_heads_;
  }

 private:
  void serve() {
    while (true) {
      tcp::socket socket = acceptor_.accept();
      if (stopping_) return;
      ++num_accepted_;
      std::string received;
      while (true) {
        boost::system::error_code ec;
        const size_t head_end = asio::read_until(socket, asio::dynamic_buffer(received), "\r\n\r\n", ec);
        if (ec) {
          ++num_closed_by_gateway_;
          break;
        }
        {
          std::lock_guard lock(mutex_);
          request_heads_.push_back(received.substr(0, head_end));
        }
        received.erase(0, head_end);
        Step step = std::move(script_.front());
        script_.pop_front();
        asio::write(socket, asio::buffer(step.response));
        if (step.close_after) break;
      }
    }
  }

  asio::io_context io_;
  tcp::acceptor acceptor_;
  std::deque<Step> script_;
  mutable std::mutex mutex_;
  std::vector<std::string> request_heads_;
  std::atomic<bool> stopping_{false};
  std::atomic<int> num_accepted_{0};
  std::atomic<int> num_closed_by_gateway_{0};
  std::thread thread_;
};

const std::string kOk = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";

class UpstreamExchangeTest : public ::testing::Test {
 protected:
  ScriptedReplica& replica(std::deque<ScriptedReplica::Step> script) { return replica_.emplace(std::move(script)); }

  std::shared_ptr<UpstreamExchange> start(const ScriptedReplica& replica, beast::error_code& head_error) {
    auto exchange = std::make_shared<UpstreamExchange>(io_.get_executor(), replica.address(),
                                                       UpstreamExchange::Request{http::verb::get, "/x", 11},
                                                       UpstreamTimeouts{}, &pool_);
    exchange->start([&head_error](beast::error_code ec) { head_error = ec; });
    run();
    return exchange;
  }

  // The whole body, or what came before an error.
  std::string read_all(UpstreamExchange& exchange, beast::error_code& error) {
    std::string body;
    bool done = false;
    while (!done && !error) {
      exchange.read_body([&](beast::error_code ec, std::string_view data, bool is_done) {
        body += data;
        error = ec;
        done = is_done;
      });
      run();
    }
    return body;
  }

  // One exchange to its end; returns the body.
  std::string exchange(const ScriptedReplica& replica) {
    beast::error_code ec;
    auto exchange = start(replica, ec);
    EXPECT_FALSE(ec) << ec.message();
    if (ec) return {};
    std::string body = read_all(*exchange, ec);
    EXPECT_FALSE(ec) << ec.message();
    exchange->finish();
    return body;
  }

  void run() {
    io_.restart();
    io_.run();
  }

  // Until the replica thread has seen `count` connections closed (it notices asynchronously).
  static void wait_for_closes(const ScriptedReplica& replica, int count) {
    for (int i = 0; i < 2000 && replica.num_closed_by_gateway() < count; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }

  // The replica goes last: its thread waits on connections the pool may still hold until the pool is gone.
  std::optional<ScriptedReplica> replica_;
  asio::io_context io_;
  UpstreamConnectionPool pool_{{}};
};

TEST_F(UpstreamExchangeTest, ConsecutiveRequestsShareOneKeepAliveConnection) {
  ScriptedReplica& replica = this->replica({{kOk}, {kOk}, {kOk}});
  for (int i = 0; i < 3; ++i) EXPECT_EQ(exchange(replica), "ok");
  EXPECT_EQ(replica.num_accepted(), 1);
  for (const std::string& head : replica.request_heads()) EXPECT_EQ(head.find("Connection: close"), std::string::npos);
  EXPECT_EQ(pool_.stats().connections_opened, 1);
  EXPECT_EQ(pool_.stats().connections_reused, 2);
  EXPECT_EQ(pool_.num_idle(replica.address().url), 1u);
}

TEST_F(UpstreamExchangeTest, AConnectionTheReplicaClosedWhileIdleIsReplacedWithoutAnError) {
  ScriptedReplica& replica = this->replica({{kOk, /*close_after=*/true}, {kOk}});
  EXPECT_EQ(exchange(replica), "ok");
  ASSERT_EQ(pool_.num_idle(replica.address().url), 1u);  // the response said nothing of the close
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the close reaches the gateway's socket
  EXPECT_EQ(exchange(replica), "ok");
  EXPECT_EQ(replica.num_accepted(), 2);
  EXPECT_EQ(pool_.stats().stale_connection_retries, 1);
  EXPECT_EQ(pool_.stats().connections_opened, 2);
}

TEST_F(UpstreamExchangeTest, AResponseSayingCloseIsNotPooled) {
  ScriptedReplica& replica =
      this->replica({{"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok"}, {kOk}});
  EXPECT_EQ(exchange(replica), "ok");
  EXPECT_EQ(pool_.num_idle(replica.address().url), 0u);
  wait_for_closes(replica, 1);
  EXPECT_EQ(replica.num_closed_by_gateway(), 1);
  EXPECT_EQ(exchange(replica), "ok");
  EXPECT_EQ(replica.num_accepted(), 2);
  EXPECT_EQ(pool_.stats().connections_reused, 0);
}

TEST_F(UpstreamExchangeTest, ACancelledStreamClosesItsConnection) {
  // A stream cut off by the client: head and one chunk, no end.
  ScriptedReplica& replica = this->replica({{"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n"}});
  beast::error_code ec;
  auto stream = start(replica, ec);
  ASSERT_FALSE(ec);
  std::string piece;
  beast::error_code read_error;
  for (int reads = 0; piece.empty() && !read_error && reads < 10; ++reads) {  // a read may end at a chunk header
    stream->read_body([&](beast::error_code ec, std::string_view data, bool) {
      piece = data;
      read_error = ec;
    });
    run();
  }
  EXPECT_EQ(piece, "hello");
  stream->cancel();
  wait_for_closes(replica, 1);
  EXPECT_EQ(replica.num_closed_by_gateway(), 1);  // what makes a tern replica cancel the generation
  EXPECT_EQ(pool_.num_idle(replica.address().url), 0u);
}

TEST_F(UpstreamExchangeTest, AResponseNotReadToItsEndIsNotPooled) {
  ScriptedReplica& replica = this->replica({{"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhalf"}});
  beast::error_code ec;
  auto exchange = start(replica, ec);
  ASSERT_FALSE(ec);
  exchange->finish();  // the caller gave up before the body's end
  EXPECT_EQ(pool_.num_idle(replica.address().url), 0u);
  wait_for_closes(replica, 1);
  EXPECT_EQ(replica.num_closed_by_gateway(), 1);
}

TEST_F(UpstreamExchangeTest, WithoutAPoolEachExchangeHasItsOwnConnection) {
  ScriptedReplica& replica = this->replica({{kOk}});
  beast::error_code ec;
  auto exchange = std::make_shared<UpstreamExchange>(io_.get_executor(), replica.address(),
                                                     UpstreamExchange::Request{http::verb::get, "/health", 11},
                                                     UpstreamTimeouts{}, /*pool=*/nullptr);
  exchange->start([&ec](beast::error_code e) { ec = e; });
  run();
  ASSERT_FALSE(ec);
  exchange->finish();
  ASSERT_EQ(replica.request_heads().size(), 1u);
  EXPECT_NE(replica.request_heads()[0].find("Connection: close"), std::string::npos);
  wait_for_closes(replica, 1);
  EXPECT_EQ(replica.num_closed_by_gateway(), 1);
}

}  // namespace
}  // namespace tern::gateway
