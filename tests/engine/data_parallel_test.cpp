// Data-parallel attention with expert parallelism on CPU ranks (docs/parallelism.md): the rank choice against its
// definition, and data-parallel models against the one-rank model: the logits of sequences run on different ranks
// at once (or with a rank idle), and the greedy tokens of concurrent requests through the engine, with prefix-cache
// hits, preemption and expert placement by the ranks' summed load.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <numeric>
#include <vector>

#include "core/error.h"
#include "engine/data_parallel_rank.h"
#include "engine/engine_core.h"
#include "engine/sharded_model.h"
#include "fixtures.h"
#include "greedy_request.h"
#include "sharded_greedy.h"
#include "model/expert_placement.h"
#include "model/layers/sparse_moe.h"
#include "model/sequence_runner.h"

namespace tern {
namespace {

using testing::fixtures_dir;
using testing::greedy;

TEST(PickDataParallelRankTest, LongestCachedPrefixThenFewestRunningThenMostBlocksThenLowestRank) {
  // The longest cached prefix wins even on the busiest rank.
  EXPECT_EQ(pick_data_parallel_rank(std::vector<RankLoad>{{0, 0, 100}, {32, 5, 1}, {16, 0, 100}}), 1);
  // Without a prefix: the fewest running sequences, then the most available blocks.
  EXPECT_EQ(pick_data_parallel_rank(std::vector<RankLoad>{{0, 3, 100}, {0, 1, 10}, {0, 2, 100}}), 1);
  EXPECT_EQ(pick_data_parallel_rank(std::vector<RankLoad>{{0, 1, 10}, {0, 1, 30}, {0, 1, 20}}), 1);
  // All equal: the lowest rank.
  EXPECT_EQ(pick_data_parallel_rank(std::vector<RankLoad>{{0, 2, 8}, {0, 2, 8}}), 0);
  EXPECT_EQ(pick_data_parallel_rank(std::vector<RankLoad>{{7, 9, 0}}), 0);
  EXPECT_THROW(pick_data_parallel_rank(std::vector<RankLoad>{}), Error);
}

// A prompt of `length` tokens below the fixtures' vocabulary of 512, different for each seed.
std::vector<int32_t> prompt_of(int length, int seed) {
  std::vector<int32_t> prompt;
  for (int i = 0; i < length; ++i) prompt.push_back((seed * 131 + i * 37 + 11) % 509);
  return prompt;
}

struct DataParallelCase {
  std::string model;
  int size;
};

void PrintTo(const DataParallelCase& c, std::ostream* os) { *os << c.model << " on " << c.size << " ranks"; }

class DataParallelTest : public ::testing::TestWithParam<DataParallelCase> {
 protected:
  std::filesystem::path dir() const { return fixtures_dir() / "models" / GetParam().model; }
  std::unique_ptr<ShardedModel> load_whole() const { return ShardedModel::load(dir(), "cpu", {}, 2); }
  std::unique_ptr<ShardedModel> load_data_parallel() const {
    const int size = GetParam().size;
    return ShardedModel::load(dir(), "cpu", {.expert_parallel_size = size, .data_parallel_size = size}, 2);
  }
};


void expect_close(const std::vector<float>& got, const std::vector<float>& expected, const std::string& label) {
  ASSERT_EQ(got.size(), expected.size()) << label;
  float max_diff = 0.0f, max_ref = 0.0f;
  for (size_t i = 0; i < got.size(); ++i) {
    max_diff = std::max(max_diff, std::abs(got[i] - expected[i]));
    max_ref = std::max(max_ref, std::abs(expected[i]));
  }
  EXPECT_LE(max_diff, 1e-4f * max_ref) << label;
}

TEST_P(DataParallelTest, LogitsOfSequencesOnDifferentRanksMatchOneRank) {
  auto whole = load_whole();
  auto data_parallel = load_data_parallel();
  ASSERT_TRUE(data_parallel->data_parallel());
  EXPECT_EQ(data_parallel->backend(1).tensor_parallel_size(), 1) << "attention must not be sharded";
  EXPECT_EQ(data_parallel->backend(1).group_rank(), 1);
  // Different lengths on every rank at once, then one prompt with the other ranks idle.
  std::vector<std::vector<int32_t>> prompts;
  for (int r = 0; r < GetParam().size; ++r) prompts.push_back(prompt_of(5 + 17 * r, r));
  for (const auto& batch : {prompts, std::vector<std::vector<int32_t>>{prompt_of(23, 9)}}) {
    const auto got = testing::logits_on_ranks(*data_parallel, batch);
    for (size_t p = 0; p < batch.size(); ++p) {
      expect_close(got[p], testing::logits_on_ranks(*whole, {batch[p]})[0],
                   "prompt " + std::to_string(p) + " of " + std::to_string(batch.size()));
    }
  }
}

struct Arrival {
  int step = 0;  // the engine step before which the request is added
  uint64_t id = 0;
  GenerateRequest request;
};

struct EngineRun {
  std::map<uint64_t, std::vector<int32_t>> tokens;
  EngineStats stats;
  std::vector<bool> rank_held_blocks;  // per rank: it held blocks for sequences in some step
  bool rank_idle_while_another_worked = false;
};

EngineRun run_engine(ShardedModel& model, EngineConfig config, const std::vector<Arrival>& arrivals,
                     const std::function<void(EngineCore&, int step)>& after_step = {}) {
  config.log_kv_cache = false;
  EngineCore core(model, config);
  const int num_kvs = model.data_parallel() ? model.size() : 1;
  int last_arrival = 0;
  for (const auto& arrival : arrivals) last_arrival = std::max(last_arrival, arrival.step);
  EngineRun run;
  run.rank_held_blocks.assign(static_cast<size_t>(num_kvs), false);
  for (int step = 0; core.has_unfinished_requests() || step <= last_arrival; ++step) {
    for (const auto& arrival : arrivals) {
      if (arrival.step == step) core.add_request(arrival.id, arrival.request);
    }
    for (const auto& out : core.step()) {
      auto& tokens = run.tokens[out.request_id];
      tokens.insert(tokens.end(), out.token_ids.begin(), out.token_ids.end());
    }
    int num_holding = 0;
    for (int r = 0; r < num_kvs; ++r) {
      const KvCacheManager& kv = core.kv_cache_manager(r);
      const bool holds = kv.num_available_blocks() < kv.num_blocks();
      num_holding += holds;
      if (holds) run.rank_held_blocks[r] = true;
    }
    if (num_holding > 0 && num_holding < num_kvs) run.rank_idle_while_another_worked = true;
    if (after_step) after_step(core, step);
  }
  run.stats = core.stats();
  return run;
}

TEST_P(DataParallelTest, ConcurrentRequestsGiveOneRanksGreedyTokens) {
  auto whole = load_whole();
  auto data_parallel = load_data_parallel();
  // Requests of different lengths and outputs, some arriving later: the ranks hold different numbers of
  // sequences, and near the end one rank has none while the longest request still runs.
  std::vector<Arrival> arrivals;
  const int lengths[] = {3, 40, 9, 17, 26, 1};
  for (int i = 0; i < 6; ++i) {
    arrivals.push_back({i < 4 ? 0 : 2 + i, static_cast<uint64_t>(i + 1), greedy(prompt_of(lengths[i], i), 4 + 5 * i)});
  }
  EngineConfig config;
  config.num_kv_blocks = 64;
  config.max_num_batched_tokens = 64;  // the 40-token prompt is prefilled in chunks
  config.overlap_schedule = true;      // tokens in flight come from each rank's own sampled ids
  const EngineRun expected = run_engine(*whole, config, arrivals);
  const EngineRun got = run_engine(*data_parallel, config, arrivals);
  ASSERT_EQ(got.tokens.size(), arrivals.size());
  for (const auto& [id, tokens] : expected.tokens) EXPECT_EQ(got.tokens.at(id), tokens) << "request " << id;
  for (size_t r = 0; r < got.rank_held_blocks.size(); ++r) EXPECT_TRUE(got.rank_held_blocks[r]) << "rank " << r;
  EXPECT_TRUE(got.rank_idle_while_another_worked);
  EXPECT_EQ(got.stats.num_kv_blocks, 64 * GetParam().size) << "each rank has a pool of its own";
}

TEST_P(DataParallelTest, APromptGoesToTheRankCachingItsPrefix) {
  auto whole = load_whole();
  auto data_parallel = load_data_parallel();
  const std::vector<int32_t> cached = prompt_of(40, 1);
  std::vector<int32_t> shares_prefix(cached.begin(), cached.begin() + 32);
  shares_prefix.insert(shares_prefix.end(), {5, 6, 7});
  // Steps 0..: the first prompt (rank 0) and another (rank 1) finish; a third goes to rank 0 (all equal), so when
  // the one sharing the first's cached 32 tokens arrives, rank 0 is the busier one and wins by its prefix.
  const std::vector<Arrival> arrivals = {{0, 1, greedy(cached, 3)},
                                         {0, 2, greedy(prompt_of(7, 2), 3)},
                                         {8, 3, greedy(prompt_of(9, 3), 12)},
                                         {9, 4, greedy(shares_prefix, 6)}};
  EngineConfig config;
  config.num_kv_blocks = 32;
  const EngineRun expected = run_engine(*whole, config, arrivals);
  int32_t rank0_hits = -1, rank1_hits = -1;
  const EngineRun got = run_engine(*data_parallel, config, arrivals, [&](EngineCore& core, int) {
    rank0_hits = static_cast<int32_t>(core.kv_cache_manager(0).prefix_stats().num_hit_tokens);
    rank1_hits = static_cast<int32_t>(core.kv_cache_manager(1).prefix_stats().num_hit_tokens);
  });
  for (const auto& [id, tokens] : expected.tokens) EXPECT_EQ(got.tokens.at(id), tokens) << "request " << id;
  EXPECT_EQ(rank0_hits, 32);
  EXPECT_EQ(rank1_hits, 0);
  EXPECT_EQ(got.stats.prefix_hit_tokens, 32);
}

TEST_P(DataParallelTest, PreemptionOnARankKeepsTheTokens) {
  auto whole = load_whole();
  auto data_parallel = load_data_parallel();
  // Each rank's pool of 6 blocks (96 tokens) cannot hold its sequences' 60 tokens each at once.
  std::vector<Arrival> arrivals;
  for (int i = 0; i < 2 * GetParam().size; ++i) {
    arrivals.push_back({0, static_cast<uint64_t>(i + 1), greedy(prompt_of(20 + i, 10 + i), 40)});
  }
  EngineConfig roomy;
  roomy.num_kv_blocks = 128;
  EngineConfig tight;
  tight.num_kv_blocks = 6;
  const EngineRun expected = run_engine(*whole, roomy, arrivals);
  const EngineRun got = run_engine(*data_parallel, tight, arrivals);
  for (const auto& [id, tokens] : expected.tokens) EXPECT_EQ(got.tokens.at(id), tokens) << "request " << id;
  EXPECT_GT(got.stats.num_preemptions, 0);
}

TEST_P(DataParallelTest, RedundantExpertsArePlacedByTheRanksSummedLoad) {
  const int size = GetParam().size;
  auto whole = load_whole();
  auto data_parallel = ShardedModel::load(
      dir(), "cpu", {.expert_parallel_size = size, .num_redundant_experts = size, .data_parallel_size = size}, 2);
  ASSERT_TRUE(data_parallel->balances_experts());
  const auto config = testing::read_json(dir() / "config.json");
  const int64_t top_k = config["num_experts_per_tok"].get<int64_t>();
  // Every rank routes its own prompt: each layer's load is all of their tokens, top_k experts each.
  std::vector<std::vector<int32_t>> prompts;
  int64_t num_tokens = 0;
  for (int r = 0; r < size; ++r) {
    prompts.push_back(prompt_of(3 + 11 * r, 20 + r));
    num_tokens += static_cast<int64_t>(prompts.back().size());
  }
  testing::logits_on_ranks(*data_parallel, prompts);
  for (const auto& layer : data_parallel->take_expert_loads()) {
    EXPECT_EQ(std::accumulate(layer.begin(), layer.end(), int64_t{0}), num_tokens * top_k);
  }
  std::vector<SparseMoe*> layers = data_parallel->model(0).expert_layers();
  ASSERT_FALSE(layers.empty());
  const ExpertPlacement initial = *layers[0]->placement();
  // The engine places the experts by measured load every 3 steps while concurrent requests generate.
  std::vector<Arrival> arrivals;
  for (int i = 0; i < 2 * size; ++i) {
    arrivals.push_back({0, static_cast<uint64_t>(i + 1), greedy(prompt_of(5 + 7 * i, i), 12)});
  }
  EngineConfig engine_config;
  engine_config.num_kv_blocks = 32;
  const EngineRun expected = run_engine(*whole, engine_config, arrivals);
  engine_config.eplb_interval_steps = 3;
  const EngineRun got = run_engine(*data_parallel, engine_config, arrivals);
  for (const auto& [id, tokens] : expected.tokens) EXPECT_EQ(got.tokens.at(id), tokens) << "request " << id;
  EXPECT_NE(*layers[0]->placement(), initial) << "the engine never placed the experts again";
}

INSTANTIATE_TEST_SUITE_P(Fixtures, DataParallelTest,
                         ::testing::Values(DataParallelCase{"qwen3_moe", 2}, DataParallelCase{"qwen3_moe", 4},
                                           DataParallelCase{"deepseek_v3", 2}, DataParallelCase{"mixtral", 2}),
                         [](const auto& info) { return info.param.model + "_dp" + std::to_string(info.param.size); });

}  // namespace
}  // namespace tern
