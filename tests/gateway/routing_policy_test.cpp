#include "gateway/routing_policy.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "core/error.h"
#include "gateway/cache_aware_policy.h"

namespace tern::gateway {
namespace {

const std::vector<std::string> kUrls = {"http://r0:1", "http://r1:1", "http://r2:1"};

std::vector<ReplicaLoad> loads(std::vector<int64_t> outstanding) {
  std::vector<ReplicaLoad> out;
  for (size_t i = 0; i < outstanding.size(); ++i) out.push_back({&kUrls[i], outstanding[i]});
  return out;
}

std::string conversation(int prefix, int turn) {
  return "system prompt of conversation " + std::to_string(prefix) + ": " + std::string(400, 'a' + prefix) +
         " user turn " + std::to_string(turn);
}

TEST(RoutingPolicy, RoundRobinCyclesWhateverTheLoad) {
  auto policy = make_routing_policy("round_robin", {});
  std::vector<size_t> chosen;
  for (int i = 0; i < 6; ++i) chosen.push_back(policy->route({}, loads({5, 0, 9})).candidate);
  EXPECT_EQ(chosen, (std::vector<size_t>{0, 1, 2, 0, 1, 2}));
}

TEST(RoutingPolicy, LeastLoadPicksFewestOutstanding) {
  auto policy = make_routing_policy("least_load", {});
  EXPECT_EQ(policy->route({}, loads({5, 2, 9})).candidate, 1u);
  EXPECT_EQ(policy->route({}, loads({3, 3, 3})).candidate, 0u);
}

TEST(RoutingPolicy, UnknownNameIsAnError) {
  EXPECT_THROW(make_routing_policy("random", {}), Error);
}

TEST(CacheAwarePolicy, SendsEachConversationBackToTheReplicaThatHoldsIt) {
  CacheAwarePolicy policy({});
  std::map<int, size_t> home;  // conversation -> replica of its first request
  int hits = 0;
  for (int turn = 0; turn < 5; ++turn) {
    for (int prefix = 0; prefix < 8; ++prefix) {
      const std::string text = conversation(prefix, turn);
      const RouteDecision d = policy.route({text}, loads({0, 0, 0}));
      if (turn == 0) {
        EXPECT_EQ(d.reason, "cache_miss");
        home[prefix] = d.candidate;
      } else {
        EXPECT_EQ(d.reason, "cache_hit") << "prefix " << prefix << " turn " << turn;
        EXPECT_EQ(d.candidate, home[prefix]) << "prefix " << prefix << " turn " << turn;
        ++hits;
      }
    }
  }
  EXPECT_EQ(hits, 32);
  // First requests spread over the replicas: a miss goes to the smallest tree when loads are equal.
  std::map<size_t, int> per_replica;
  for (auto& [prefix, replica] : home) ++per_replica[replica];
  EXPECT_EQ(per_replica.size(), 3u);
}

TEST(CacheAwarePolicy, MissGoesToLeastLoaded) {
  CacheAwarePolicy policy({});
  EXPECT_EQ(policy.route({"fresh text"}, loads({4, 1, 3})).candidate, 1u);
}

TEST(CacheAwarePolicy, ShortMatchBelowThresholdIsAMiss) {
  CacheAwareConfig config;
  config.cache_threshold = 0.5;
  CacheAwarePolicy policy(config);
  ASSERT_EQ(policy.route({"abcdefghij-first"}, loads({0, 5})).candidate, 0u);
  // 4 of 20 bytes match replica 0: below the threshold, so the least loaded (replica 1) gets it.
  const RouteDecision d = policy.route({"abcd0123456789012345"}, loads({0, 0}));
  EXPECT_EQ(d.reason, "cache_miss");
  EXPECT_EQ(d.candidate, 1u);  // equal load: the smaller (empty) tree
}

TEST(CacheAwarePolicy, ImbalanceOverridesTheCache) {
  CacheAwareConfig config;
  config.balance_abs_threshold = 4;
  config.balance_rel_threshold = 1.5;
  CacheAwarePolicy policy(config);
  const std::string text = conversation(0, 0);
  ASSERT_EQ(policy.route({text}, loads({0, 0})).candidate, 0u);
  // Within the thresholds (diff 4, not above 4): the cache wins even though replica 0 is busier.
  EXPECT_EQ(policy.route({text}, loads({4, 0})).candidate, 0u);
  // Beyond both: the least loaded, and the text is then remembered there too.
  const RouteDecision d = policy.route({text}, loads({10, 1}));
  EXPECT_EQ(d.reason, "load_imbalance");
  EXPECT_EQ(d.candidate, 1u);
  EXPECT_EQ(policy.tree_chars(kUrls[1]), text.size());
  // Absolute difference large but relative small (100 vs 90): still balanced.
  EXPECT_EQ(policy.route({text}, loads({100, 90})).reason, "cache_hit");
}

TEST(CacheAwarePolicy, ForgetDropsAReplicasTree) {
  CacheAwarePolicy policy({});
  policy.route({"some text"}, loads({0}));
  EXPECT_GT(policy.tree_chars(kUrls[0]), 0u);
  policy.forget(kUrls[0]);
  EXPECT_EQ(policy.tree_chars(kUrls[0]), 0u);
}

}  // namespace
}  // namespace tern::gateway
