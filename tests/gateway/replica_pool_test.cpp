#include "gateway/replica_pool.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace tern::gateway {
namespace {

TEST(ReplicaAddress, ParsesAndNormalizes) {
  EXPECT_EQ(parse_replica_url("http://127.0.0.1:8000/").url, "http://127.0.0.1:8000");
  const ReplicaAddress a = parse_replica_url("localhost:9000");
  EXPECT_EQ(a.url, "http://localhost:9000");
  EXPECT_EQ(a.host, "localhost");
  EXPECT_EQ(a.port, "9000");
  EXPECT_THROW(parse_replica_url("https://x:1"), Error);
  EXPECT_THROW(parse_replica_url("http://x"), Error);
  EXPECT_THROW(parse_replica_url("http://x:0"), Error);
  EXPECT_THROW(parse_replica_url("http://x:70000"), Error);
  EXPECT_THROW(parse_replica_url("http://x:80/v1"), Error);
}

TEST(ReplicaPool, RoutesOnlyToHealthyReplicasNotYetTried) {
  ReplicaPool pool(make_routing_policy("round_robin", {}));
  ASSERT_TRUE(pool.add(parse_replica_url("http://a:1")));
  ASSERT_TRUE(pool.add(parse_replica_url("http://b:1")));
  EXPECT_FALSE(pool.add(parse_replica_url("http://a:1/")));
  EXPECT_FALSE(pool.acquire({}, {}).has_value());  // new replicas wait for a health check
  pool.set_healthy("http://a:1", true);
  pool.set_healthy("http://b:1", true);
  EXPECT_EQ(pool.num_healthy(), 2u);
  const std::vector<std::string> tried = {"http://a:1"};
  for (int i = 0; i < 3; ++i) {
    auto lease = pool.acquire({}, tried);
    ASSERT_TRUE(lease.has_value());
    EXPECT_EQ(lease->address.url, "http://b:1");
  }
  EXPECT_EQ(pool.list()[1].num_outstanding, 3);
  EXPECT_TRUE(pool.release("http://b:1"));
  EXPECT_EQ(pool.list()[1].num_outstanding, 2);
  pool.set_healthy("http://b:1", false);
  EXPECT_FALSE(pool.acquire({}, tried).has_value());
}

TEST(ReplicaPool, RemovedReplicasAreNotChosenAndLateReleasesAreIgnored) {
  ReplicaPool pool(make_routing_policy("least_load", {}));
  pool.add(parse_replica_url("http://a:1"));
  pool.add(parse_replica_url("http://b:1"));
  pool.set_healthy("http://a:1", true);
  pool.set_healthy("http://b:1", true);
  auto lease = pool.acquire({}, {});
  ASSERT_TRUE(lease.has_value());
  EXPECT_TRUE(pool.remove(lease->address.url));
  EXPECT_FALSE(pool.remove(lease->address.url));
  EXPECT_FALSE(pool.release(lease->address.url));  // the caller then keeps no connection to it
  ASSERT_EQ(pool.list().size(), 1u);
  EXPECT_EQ(pool.list()[0].num_outstanding, 0);
  for (int i = 0; i < 3; ++i) EXPECT_NE(pool.acquire({}, {})->address.url, lease->address.url);
}

TEST(ReplicaPool, LeastLoadSeesOutstandingCounts) {
  ReplicaPool pool(make_routing_policy("least_load", {}));
  for (const char* url : {"http://a:1", "http://b:1", "http://c:1"}) {
    pool.add(parse_replica_url(url));
    pool.set_healthy(url, true);
  }
  std::vector<std::string> order;
  for (int i = 0; i < 6; ++i) order.push_back(pool.acquire({}, {})->address.url);
  EXPECT_EQ(order, (std::vector<std::string>{"http://a:1", "http://b:1", "http://c:1", "http://a:1", "http://b:1",
                                             "http://c:1"}));
}

}  // namespace
}  // namespace tern::gateway
