// Tensor parallelism on CPU ranks (threads of this process): the collectives against their definitions, the
// weight shards against the whole tensors they were cut from, and sharded models against the unsharded model
// (recombined partial results equal the whole computation, and greedy decoding picks the same tokens).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <numeric>
#include <random>
#include <thread>

#include "backend/cpu/host_collective.h"
#include "core/error.h"
#include "engine/sharded_model.h"
#include "fixtures.h"
#include "sharded_greedy.h"
#include "model/checkpoint.h"
#include "model/expert_placement.h"
#include "model/layers/sparse_moe.h"
#include "model/sequence_runner.h"
#include "model/weight_loader.h"

namespace tern {
namespace {

using testing::fixtures_dir;
using testing::read_json;
using testing::sharded_greedy_tokens;

template <typename Work>
void on_threads(int size, Work work) {
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) threads.emplace_back(work, r);
  for (auto& thread : threads) thread.join();
}

TEST(HostCollectiveTest, AllReduceSumsInRankOrderOnEveryRank) {
  constexpr int kRanks = 3;
  HostCollective collective(kRanks);
  std::vector<std::vector<float>> values(kRanks);
  for (int r = 0; r < kRanks; ++r) values[r] = {1.0f * r, 0.1f * (r + 1), 1e8f * (r == 0) - 1e8f * (r == 1), 3.0f};
  on_threads(kRanks, [&](int r) {
    for (int round = 0; round < 2; ++round) collective.all_reduce_sum(r, values[r].data(), 4);
  });
  // Two rounds: the first round's sums, summed over the three ranks again.
  const float first_second = ((0.1f + 0.2f) + 0.3f) * 3.0f;
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_EQ(values[r], values[0]) << "rank " << r << " differs from rank 0";
    EXPECT_FLOAT_EQ(values[r][0], 9.0f);
    EXPECT_FLOAT_EQ(values[r][1], first_second);
    EXPECT_FLOAT_EQ(values[r][3], 27.0f);
  }
}

TEST(HostCollectiveTest, AllGatherPlacesShardsSideBySideAndCutsThePadding) {
  constexpr int kRanks = 3;
  HostCollective collective(kRanks);
  // Two rows of two columns per rank; eight columns wanted (the last rank's second column is padding).
  std::vector<std::vector<float>> shards(kRanks);
  for (int r = 0; r < kRanks; ++r) shards[r] = {10.0f * r, 10.0f * r + 1, 10.0f * r + 2, 10.0f * r + 3};
  std::vector<std::vector<float>> out(kRanks, std::vector<float>(2 * 5));
  on_threads(kRanks, [&](int r) { collective.all_gather_columns(r, shards[r].data(), 2, 2, out[r].data(), 5); });
  const std::vector<float> expected = {0, 1, 10, 11, 20, 2, 3, 12, 13, 22};
  for (int r = 0; r < kRanks; ++r) EXPECT_EQ(out[r], expected) << "rank " << r;
}

TEST(HostCollectiveTest, AllToAllDeliversRowsBySourceRankWithEmptyShares) {
  constexpr int kRanks = 3;
  HostCollective collective(kRanks);
  // counts[source][destination]; rank 1 sends and receives nothing, rank 2 sends to itself.
  const std::vector<std::vector<int64_t>> counts = {{1, 0, 2}, {0, 0, 0}, {3, 0, 1}};
  // A row is two int32s: 100 * source + 10 * destination + index, and the source again.
  const auto row = [](int source, int destination, int index) {
    return std::vector<int32_t>{100 * source + 10 * destination + index, source};
  };
  std::vector<std::vector<int32_t>> received(kRanks);
  std::vector<std::vector<int64_t>> received_counts(kRanks);
  on_threads(kRanks, [&](int r) {
    std::vector<int32_t> rows;
    for (int d = 0; d < kRanks; ++d) {
      for (int i = 0; i < counts[r][d]; ++i) {
        const auto values = row(r, d, i);
        rows.insert(rows.end(), values.begin(), values.end());
      }
    }
    const auto bytes = collective.all_to_all(r, reinterpret_cast<const std::byte*>(rows.data()), 2 * sizeof(int32_t),
                                             counts[r], received_counts[r]);
    received[r].resize(bytes.size() / sizeof(int32_t));
    std::memcpy(received[r].data(), bytes.data(), bytes.size());
  });
  for (int d = 0; d < kRanks; ++d) {
    std::vector<int32_t> expected;
    std::vector<int64_t> expected_counts;
    for (int s = 0; s < kRanks; ++s) {
      expected_counts.push_back(counts[s][d]);
      for (int i = 0; i < counts[s][d]; ++i) {
        const auto values = row(s, d, i);
        expected.insert(expected.end(), values.begin(), values.end());
      }
    }
    EXPECT_EQ(received[d], expected) << "rank " << d;
    EXPECT_EQ(received_counts[d], expected_counts) << "rank " << d;
  }
}

std::vector<float> loaded(Backend& backend, const Tensor& t) { return backend.to_host_f32(t); }

// Columns [begin, begin + count) of a row-major [rows, columns] matrix.
std::vector<float> columns_of(const std::vector<float>& m, int64_t columns, int64_t begin, int64_t count) {
  std::vector<float> out;
  for (size_t r = 0; r < m.size() / columns; ++r) {
    out.insert(out.end(), m.begin() + r * columns + begin, m.begin() + r * columns + begin + count);
  }
  return out;
}

TEST(WeightShardTest, ShardsRecombineIntoTheWholeTensor) {
  const auto dir = fixtures_dir() / "models" / "llama";
  const Checkpoint checkpoint = Checkpoint::open(dir);
  auto whole_backend = make_cpu_backend(1);
  WeightLoader whole(checkpoint, *whole_backend);
  const std::string q = "model.layers.0.self_attn.q_proj.weight", k = "model.layers.0.self_attn.k_proj.weight";
  const std::string o = "model.layers.0.self_attn.o_proj.weight", embed = "model.embed_tokens.weight";
  const auto q_all = loaded(*whole_backend, whole.load(q, {64, 64}));
  const auto k_all = loaded(*whole_backend, whole.load(k, {32, 64}));
  const auto o_all = loaded(*whole_backend, whole.load(o, {64, 64}));
  const auto embed_all = loaded(*whole_backend, whole.load(embed, {512, 64}));

  for (int size : {2, 3}) {
    auto group = make_cpu_backend_group(size, size);
    std::vector<float> embed_joined;
    for (int rank = 0; rank < size; ++rank) {
      auto backend = group->make(rank);
      WeightLoader shard(checkpoint, *backend);
      ASSERT_EQ(shard.shard().rank, rank);
      ASSERT_EQ(shard.shard().size, size);
      const auto embed_shard = loaded(*backend, shard.load_vocab_shard(embed, {512, 64}));
      ASSERT_EQ(embed_shard.size(), static_cast<size_t>(shard.vocab_shard_rows(512) * 64));
      embed_joined.insert(embed_joined.end(), embed_shard.begin(), embed_shard.end());
      if (size == 3) {
        EXPECT_THROW(shard.load_row_shards({{q, {64, 64}}}), Error) << "64 rows do not split over 3 ranks";
        continue;
      }
      // Column-parallel: this rank's rows of q, then of k.
      const auto qk = loaded(*backend, shard.load_row_shards({{q, {64, 64}}, {k, {32, 64}}}));
      std::vector<float> expected(q_all.begin() + rank * 32 * 64, q_all.begin() + (rank + 1) * 32 * 64);
      expected.insert(expected.end(), k_all.begin() + rank * 16 * 64, k_all.begin() + (rank + 1) * 16 * 64);
      EXPECT_EQ(qk, expected);
      // Row-parallel: this rank's columns.
      EXPECT_EQ(loaded(*backend, shard.load_column_shard(o, {64, 64})), columns_of(o_all, 64, rank * 32, 32));
    }
    // The vocab shards in rank order are the table, then zero padding (512 rows over 3 ranks: 171 + 171 + 170 + 1).
    ASSERT_GE(embed_joined.size(), embed_all.size());
    EXPECT_TRUE(std::equal(embed_all.begin(), embed_all.end(), embed_joined.begin())) << size << " ranks";
    EXPECT_TRUE(std::all_of(embed_joined.begin() + embed_all.size(), embed_joined.end(), [](float v) { return v == 0; }));
  }
}


// The sharded model gives `prompt` the unsharded model's last-token logits (float32 sums in another order: rounding
// only) and greedy tokens (through the engine, placing experts every `eplb_interval_steps` steps when above 0).
void expect_same_outputs(ShardedModel& whole, ShardedModel& sharded, const std::vector<int32_t>& prompt,
                         const std::string& label, int64_t eplb_interval_steps = 0) {
  const auto expected = testing::prompt_logits(whole, prompt);
  const auto got = testing::prompt_logits(sharded, prompt);
  ASSERT_EQ(got.size(), expected.size());
  float max_diff = 0.0f, max_ref = 0.0f;
  for (size_t i = 0; i < got.size(); ++i) {
    max_diff = std::max(max_diff, std::abs(got[i] - expected[i]));
    max_ref = std::max(max_ref, std::abs(expected[i]));
  }
  EXPECT_LE(max_diff, 1e-4f * max_ref) << label;
  EXPECT_EQ(sharded_greedy_tokens(sharded, prompt, 24, eplb_interval_steps), sharded_greedy_tokens(whole, prompt, 24))
      << label;
}

struct ShardedCase {
  std::string model;
  int size;
  // Split (llama: 2 over 2 ranks), replicated because there are fewer than ranks (the chat fixtures' single head),
  // or cached whole on every rank (MLA's latent: its attention is not sharded).
  int64_t kv_heads_per_rank = 1;
  int expert_parallel_size = 1;  // size: each rank holds its share of the MoE experts
  int64_t num_redundant_experts = 0;
};

void PrintTo(const ShardedCase& c, std::ostream* os) {
  *os << c.model << " on " << c.size << " ranks, expert parallel size " << c.expert_parallel_size << ", "
      << c.num_redundant_experts << " redundant experts";
}

class ShardedModelTest : public ::testing::TestWithParam<ShardedCase> {};

TEST_P(ShardedModelTest, MatchesTheUnshardedModel) {
  const auto& [name, size, kv_heads_per_rank, expert_parallel_size, num_redundant_experts] = GetParam();
  const auto dir = fixtures_dir() / "models" / name;
  const auto golden = read_json(dir / "golden.json");
  auto whole = ShardedModel::load(dir, "cpu", {}, 2);
  auto sharded = ShardedModel::load(dir, "cpu",
                                      {.tensor_parallel_size = size,
                                       .expert_parallel_size = expert_parallel_size,
                                       .num_redundant_experts = num_redundant_experts},
                                      2);
  ASSERT_EQ(sharded->size(), size);
  EXPECT_EQ(sharded->backend(size - 1).tensor_parallel_rank(), size - 1);
  EXPECT_EQ(sharded->backend(0).expert_parallel(), expert_parallel_size > 1);
  for (int rank = 0; rank < size; ++rank) {
    EXPECT_EQ(sharded->model(rank).kv_layers()[0].num_kv_heads, kv_heads_per_rank) << "rank " << rank;
  }
  for (size_t p = 0; p < golden["prompts"].size(); ++p) {
    expect_same_outputs(*whole, *sharded, golden["prompts"][p].get<std::vector<int32_t>>(),
                        name + " prompt " + std::to_string(p) + " on " + std::to_string(size) + " ranks");
  }
}

INSTANTIATE_TEST_SUITE_P(
    Fixtures, ShardedModelTest,
    ::testing::Values(ShardedCase{"llama", 2}, ShardedCase{"llama3_rope", 2}, ShardedCase{"qwen2", 2},
                      ShardedCase{"qwen3", 2}, ShardedCase{"qwen3_moe", 2}, ShardedCase{"gpt_oss", 2},
                      ShardedCase{"deepseek_v3", 2}, ShardedCase{"qwen3-chat-tiny", 2}, ShardedCase{"llama3-chat-tiny", 2},
                      ShardedCase{"llama", 4}, ShardedCase{"tern-py-13m", 4}, ShardedCase{"qwen3_moe", 2, 1, 2},
                      ShardedCase{"gpt_oss", 2, 1, 2}, ShardedCase{"deepseek_v3", 2, 1, 2},
                      ShardedCase{"qwen3_moe", 2, 1, 2, 2}, ShardedCase{"gpt_oss", 2, 1, 2, 2},
                      ShardedCase{"deepseek_v3", 2, 1, 2, 2}),
    [](const auto& info) {
      std::string name = info.param.model + "_tp" + std::to_string(info.param.size);
      if (info.param.expert_parallel_size > 1) name += "_ep" + std::to_string(info.param.expert_parallel_size);
      if (info.param.num_redundant_experts > 0) name += "_redundant" + std::to_string(info.param.num_redundant_experts);
      for (char& c : name) c = std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
      return name;
    });

struct ContextParallelCase {
  std::string model;
  int size;
};

void PrintTo(const ContextParallelCase& c, std::ostream* os) {
  *os << c.model << " with decode context parallelism over " << c.size << " ranks";
}

class DecodeContextParallelTest : public ::testing::TestWithParam<ContextParallelCase> {};

// Each rank caches every size-th token and runs every attention head; the merged partial attentions give the
// unsharded model's logits and greedy tokens, for prompts within one block and across several (blocks of 2 tokens
// per rank: the 40-token prompt and its 24 tokens span 32 logical blocks over 2 ranks).
TEST_P(DecodeContextParallelTest, MatchesTheUnshardedModel) {
  const auto& [name, size] = GetParam();
  const auto dir = fixtures_dir() / "models" / name;
  const auto golden = read_json(dir / "golden.json");
  auto whole = ShardedModel::load(dir, "cpu", {}, 2);
  auto sharded = ShardedModel::load(dir, "cpu", {.tensor_parallel_size = size, .decode_context_parallel_size = size}, 2);
  for (int rank = 0; rank < size; ++rank) {
    EXPECT_TRUE(sharded->backend(rank).decode_context_parallel());
    EXPECT_EQ(sharded->backend(rank).kv_context_shard().rank, rank);
    EXPECT_EQ(sharded->backend(rank).kv_context_shard().size, size);
    // Attention is not split by heads: every rank caches the unsharded model's key/value heads.
    EXPECT_EQ(sharded->model(rank).kv_layers()[0].num_kv_heads, whole->model(0).kv_layers()[0].num_kv_heads);
  }
  for (size_t p = 0; p < golden["prompts"].size(); ++p) {
    const auto prompt = golden["prompts"][p].get<std::vector<int32_t>>();
    const std::string label = name + " prompt " + std::to_string(p) + " over " + std::to_string(size) + " ranks";
    expect_same_outputs(*whole, *sharded, prompt, label);
    EXPECT_EQ(sharded_greedy_tokens(*sharded, prompt, 24, 0, 2), sharded_greedy_tokens(*whole, prompt, 24)) << label;
  }
}

// Requests sharing a prefix, on a pool far smaller than their load: the later ones hit the cached prefix blocks,
// sequences are preempted and recomputed, and every request gets the tokens it gets alone on one rank.
TEST_P(DecodeContextParallelTest, PrefixHitsAndPreemptionKeepTheTokens) {
  const auto& [name, size] = GetParam();
  const auto dir = fixtures_dir() / "models" / name;
  auto whole = ShardedModel::load(dir, "cpu", {}, 2);
  auto sharded = ShardedModel::load(dir, "cpu", {.tensor_parallel_size = size, .decode_context_parallel_size = size}, 2);
  std::mt19937 rng(7);
  std::vector<int32_t> prefix(24);
  for (auto& t : prefix) t = static_cast<int32_t>(rng() % 512);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 6; ++i) {
    auto prompt = prefix;
    for (int j = 0; j < 6 + i; ++j) prompt.push_back(static_cast<int32_t>(rng() % 512));
    prompts.push_back(std::move(prompt));
  }
  EngineConfig config;
  config.block_size = 2;              // per rank: logical blocks of 2 * size tokens
  config.num_kv_blocks = 48 / size;  // 96 tokens for ~5 * 46 of load, less the shared prefix
  config.max_num_batched_tokens = 64;
  config.log_kv_cache = false;
  EngineCore core(*sharded, config);
  EXPECT_EQ(core.kv_cache_manager().block_size(), 2 * size) << "the scheduler's blocks hold every rank's share";
  const auto request = [](const std::vector<int32_t>& prompt) {
    GenerateRequest r;
    r.prompt_token_ids = prompt;
    r.sampling.temperature = 0.0f;
    r.stop.max_tokens = 16;
    r.stop.ignore_eos = true;
    return r;
  };
  std::map<uint64_t, std::vector<int32_t>> tokens;
  const auto drain = [&] {
    while (core.has_unfinished_requests()) {
      for (const auto& out : core.step()) {
        tokens[out.request_id].insert(tokens[out.request_id].end(), out.token_ids.begin(), out.token_ids.end());
      }
    }
  };
  core.add_request(0, request(prompts[0]));  // caches the prefix for the others
  drain();
  for (size_t i = 1; i < prompts.size(); ++i) core.add_request(i, request(prompts[i]));
  drain();
  EXPECT_GT(core.stats().prefix_hit_tokens, 0);
  EXPECT_GT(core.stats().num_preemptions, 0);
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(tokens[i], sharded_greedy_tokens(*whole, prompts[i], 16)) << name << " request " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, DecodeContextParallelTest,
                         ::testing::Values(ContextParallelCase{"llama", 2}, ContextParallelCase{"qwen3", 2},
                                           ContextParallelCase{"deepseek_v3", 2}, ContextParallelCase{"llama", 4},
                                           ContextParallelCase{"deepseek_v3", 4}),
                         [](const auto& info) {
                           std::string name = info.param.model + "_dcp" + std::to_string(info.param.size);
                           for (char& c : name) c = std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
                           return name;
                         });

// Each MoE layer's placement on every rank; the ranks must agree.
std::vector<ExpertPlacement> placements(ShardedModel& model) {
  std::vector<ExpertPlacement> result;
  for (SparseMoe* layer : model.model(0).expert_layers()) result.push_back(*layer->placement());
  for (int rank = 1; rank < model.size(); ++rank) {
    const auto layers = model.model(rank).expert_layers();
    EXPECT_EQ(layers.size(), result.size());
    for (size_t i = 0; i < layers.size() && i < result.size(); ++i) {
      EXPECT_EQ(*layers[i]->placement(), result[i]) << "rank " << rank << " layer " << i;
    }
  }
  return result;
}

class ExpertLoadBalancingTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ExpertLoadBalancingTest, CountsTokensAndKeepsOutputsThroughNewPlacements) {
  const std::string name = GetParam();
  const auto dir = fixtures_dir() / "models" / name;
  const auto golden = read_json(dir / "golden.json");
  const auto config = read_json(dir / "config.json");
  const int64_t top_k = config["num_experts_per_tok"].get<int64_t>();
  auto whole = ShardedModel::load(dir, "cpu", {}, 2);
  auto sharded = ShardedModel::load(dir, "cpu", {.tensor_parallel_size = 2, .expert_parallel_size = 2, .num_redundant_experts = 2}, 2);
  ASSERT_TRUE(sharded->balances_experts());
  EXPECT_FALSE(whole->balances_experts());

  // A known batch: one prompt's tokens, each routed to top_k experts by every MoE layer.
  const auto prompt = golden["prompts"][0].get<std::vector<int32_t>>();
  testing::prompt_logits(*sharded, prompt);
  const auto loads = sharded->take_expert_loads();
  const auto initial = placements(*sharded);
  ASSERT_FALSE(loads.empty());
  ASSERT_EQ(loads.size(), initial.size());
  for (size_t i = 0; i < loads.size(); ++i) {
    ASSERT_EQ(static_cast<int64_t>(loads[i].size()), initial[i].num_experts);
    EXPECT_TRUE(std::all_of(loads[i].begin(), loads[i].end(), [](int64_t n) { return n >= 0; }));
    EXPECT_EQ(std::accumulate(loads[i].begin(), loads[i].end(), int64_t{0}),
              static_cast<int64_t>(prompt.size()) * top_k)
        << "layer " << i;
    EXPECT_EQ(initial[i].num_slots(), initial[i].num_experts + 2);
  }
  const auto idle = sharded->take_expert_loads();
  for (const auto& layer : idle) {
    EXPECT_TRUE(std::all_of(layer.begin(), layer.end(), [](int64_t n) { return n == 0; })) << "counted twice";
  }
  sharded->place_experts(idle);
  EXPECT_EQ(placements(*sharded), initial) << "layers that saw no tokens were placed again";

  // Forced skew: expert 1 of every layer takes nearly all tokens, so both redundant slots replicate it.
  std::vector<std::vector<int64_t>> skewed;
  for (const auto& placement : initial) {
    std::vector<int64_t> layer(placement.num_experts, 1);
    layer[1] = 1000;
    skewed.push_back(layer);
  }
  sharded->place_experts(skewed);
  const auto rebalanced = placements(*sharded);
  for (size_t i = 0; i < rebalanced.size(); ++i) {
    EXPECT_NE(rebalanced[i], initial[i]) << "layer " << i << " kept its placement";
    EXPECT_EQ(rebalanced[i].expert_slots()[1].size(), 3u) << "layer " << i;
  }
  for (size_t p = 0; p < golden["prompts"].size(); ++p) {
    expect_same_outputs(*whole, *sharded, golden["prompts"][p].get<std::vector<int32_t>>(),
                        name + " prompt " + std::to_string(p) + " after a forced placement");
  }

  // The engine places experts by measured load every 3 steps while it generates.
  expect_same_outputs(*whole, *sharded, prompt, name + " placing experts every 3 steps", 3);
  EXPECT_NE(placements(*sharded), rebalanced) << "the engine never placed the experts again";
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ExpertLoadBalancingTest, ::testing::Values("qwen3_moe", "gpt_oss", "deepseek_v3"),
                         [](const auto& info) { return info.param; });

// `load` must fail with an error containing `message`.
template <typename Load>
void expect_failure(Load load, const std::string& message) {
  try {
    load();
    ADD_FAILURE() << "accepted; expected: " << message;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
  }
}

TEST(ShardedModelErrors, ExpertBalancingFlagsFailByName) {
  const auto dir = fixtures_dir() / "models" / "qwen3_moe";
  expect_failure([&] { ShardedModel::load(dir, "cpu", {.tensor_parallel_size = 2, .num_redundant_experts = 2}, 2); },
                 "--num-redundant-experts 2: needs expert parallelism");
  expect_failure([&] { ShardedModel::load(dir, "cpu", {.tensor_parallel_size = 2, .expert_parallel_size = 2, .num_redundant_experts = 1}, 2); },
                 "8 experts + 1 redundant (--num-redundant-experts) = 9 expert slots do not split evenly over 2 "
                 "expert-parallel ranks");
  auto tensor_parallel = ShardedModel::load(dir, "cpu", {.tensor_parallel_size = 2}, 2);
  EngineConfig config;
  config.num_kv_blocks = 16;
  config.log_kv_cache = false;
  config.eplb_interval_steps = 10;
  expect_failure([&] { EngineCore core(*tensor_parallel, config); }, "--eplb-interval 10: needs expert parallelism");
}

TEST(ShardedModelErrors, DataParallelCombinationsFailByName) {
  const auto dir = fixtures_dir() / "models" / "qwen3_moe";
  expect_failure([&] { ShardedModel::load(dir, "cpu", {.tensor_parallel_size = 2, .expert_parallel_size = 2, .data_parallel_size = 2}, 2); },
                 "--data-parallel-size 2 with --tensor-parallel-size 2");
  expect_failure([&] { ShardedModel::load(dir, "cpu", {.data_parallel_size = 2}, 2); },
                 "--data-parallel-size 2: needs --expert-parallel-size 2");
}

TEST(ShardedModelErrors, ExpertParallelSizeMustBeOneOrTheTensorParallelSize) {
  try {
    ShardedModel::load(fixtures_dir() / "models" / "qwen3_moe", "cpu", {.tensor_parallel_size = 2, .expert_parallel_size = 4}, 2);
    FAIL() << "expert parallel size 4 on 2 ranks was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--expert-parallel-size 4: must be 1 or the tensor-parallel size 2"),
              std::string::npos)
        << e.what();
  }
}

TEST(ShardedModelErrors, DecodeContextParallelismRefusesWhatItDoesNotCover) {
  expect_failure([&] { ShardedModel::load(fixtures_dir() / "models" / "llama", "cpu", {.tensor_parallel_size = 2, .decode_context_parallel_size = 4}, 2); },
                 "--decode-context-parallel-size 4: must be 1 or the tensor-parallel size 2");
  expect_failure([&] { ShardedModel::load(fixtures_dir() / "models" / "gpt_oss", "cpu", {.tensor_parallel_size = 2, .decode_context_parallel_size = 2}, 2); },
                 "has attention sinks");
  expect_failure([&] { ShardedModel::load(fixtures_dir() / "models" / "deepseek_v4", "cpu", {.tensor_parallel_size = 2, .decode_context_parallel_size = 2}, 2); },
                 "is DeepSeek-V4's compressed attention");
}

TEST(ShardedModelErrors, HeadsThatDoNotSplitFailByName) {
  // The llama fixture has 4 attention heads: 3 ranks cannot split them.
  try {
    ShardedModel::load(fixtures_dir() / "models" / "llama", "cpu", {.tensor_parallel_size = 3}, 3);
    FAIL() << "loading 4 attention heads on 3 ranks succeeded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("attention heads (4) does not split evenly over 3 ranks"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace tern
