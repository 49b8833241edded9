// `tern bench --dataset-name multi-turn`: conversations whose turns resend the growing history, every turn run, the
// history found in the prefix cache from the second turn on, and the mistakes refused with a reason.
#include <gtest/gtest.h>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "bench_command.h"
#include "fixtures.h"

namespace tern {
namespace {

namespace fs = std::filesystem;

const fs::path kLlama = testing::fixtures_dir() / "models" / "llama";  // 512 positions, 512 ids

class BenchMultiTurn : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("tern_bench_multi_turn_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // `tern bench` on the tiny Llama fixture with a small KV pool (64 blocks of 16 tokens), `args` after the common
  // flags.
  testing::BenchRun bench(const std::string& args) const {
    return testing::run_bench(dir_, "--model " + kLlama.string() + " --backend cpu --threads 1 --num-kv-blocks 64 --block-size 16 " + args);
  }

  fs::path dir_;
};

// 3 conversations of 3 turns, 20-token messages and 4-token replies. Turn t's prompt is every message and reply
// before it plus its own message: 20, 44 and 68 tokens. Of the history, the previous turn's prompt and all of its
// reply but the last token have KV (the last was sampled, never fed back): 23 tokens before turn 2, 47 before turn
// 3, whose whole 16-token blocks (16 and 32 tokens) the prefix cache gives back. The messages are random ids, so
// no conversation shares a block with another.
void expect_three_by_three(const nlohmann::json& report, int64_t max_concurrency) {
  EXPECT_EQ(report.at("dataset"), (nlohmann::json{{"name", "multi-turn"}}));
  const auto& multi_turn = report.at("multi_turn");
  EXPECT_EQ(multi_turn.at("conversations"), 3);
  EXPECT_EQ(multi_turn.at("turns"), 3);
  EXPECT_EQ(multi_turn.at("max_concurrency"), max_concurrency);
  EXPECT_EQ(multi_turn.at("requests"), 9);
  const auto& per_turn = multi_turn.at("per_turn");
  EXPECT_EQ(per_turn.at("prompt_tokens"), (nlohmann::json{3 * 20, 3 * 44, 3 * 68}));
  EXPECT_EQ(per_turn.at("cached_tokens"), (nlohmann::json{0, 3 * 16, 3 * 32}));
  ASSERT_EQ(per_turn.at("ttft_ms_p50").size(), 3u);
  for (const auto& ttft : per_turn.at("ttft_ms_p50")) EXPECT_GT(ttft.get<double>(), 0);
  ASSERT_EQ(per_turn.at("prefix_hit_rate").size(), 3u);
  EXPECT_DOUBLE_EQ(per_turn.at("prefix_hit_rate")[1].get<double>(), 16.0 / 44);
  const auto& prefix_cache = multi_turn.at("prefix_cache");
  EXPECT_EQ(prefix_cache.at("prompt_tokens"), 3 * (20 + 44 + 68));
  EXPECT_EQ(prefix_cache.at("cached_tokens"), 3 * (16 + 32));
  EXPECT_DOUBLE_EQ(prefix_cache.at("hit_rate").get<double>(), 144.0 / 396);
  EXPECT_EQ(multi_turn.at("kv_pool_tokens"), 64 * 16);
  EXPECT_EQ(multi_turn.at("working_set_tokens"), 3 * 3 * (20 + 4));
  EXPECT_GT(multi_turn.at("ttft_ms_turns_2_on").at("p50").get<double>(), 0);
  EXPECT_GT(multi_turn.at("latency_ms").at("p50").get<double>(), 0);
  EXPECT_GT(report.at("ttft_ms").at("p50").get<double>(), 0);
  EXPECT_GT(report.at("itl_ms").at("p50").get<double>(), 0);
  EXPECT_NEAR(report.at("input_tokens_per_s").get<double>() / report.at("requests_per_s").get<double>(), 396.0 / 9,
              1e-6);
  EXPECT_NEAR(report.at("output_tokens_per_s").get<double>() / report.at("requests_per_s").get<double>(), 4.0, 1e-6);
}

TEST_F(BenchMultiTurn, EveryTurnRunsAndFindsItsHistoryCached) {
  const testing::BenchRun result =
      bench("--dataset-name multi-turn --num-prompts 3 --num-turns 3 --input-len 20 --output-len 4");
  ASSERT_EQ(result.exit_code, 0) << result.err;
  expect_three_by_three(nlohmann::json::parse(result.out), 3);
}

// One conversation in flight at a time: the others wait their turn, and every turn still runs.
TEST_F(BenchMultiTurn, ConversationsTakeTurnsUnderMaxConcurrency) {
  const testing::BenchRun result = bench(
      "--dataset-name multi-turn --num-prompts 3 --num-turns 3 --input-len 20 --output-len 4 --max-concurrency 1");
  ASSERT_EQ(result.exit_code, 0) << result.err;
  expect_three_by_three(nlohmann::json::parse(result.out), 1);
}

// Without the prefix cache nothing is reused: the hit rate is what the engine reports, not what the prompts share.
TEST_F(BenchMultiTurn, NoPrefixCacheNoHits) {
  const testing::BenchRun result = bench(
      "--dataset-name multi-turn --num-prompts 2 --num-turns 2 --input-len 20 --output-len 4 --no-prefix-cache");
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const auto multi_turn = nlohmann::json::parse(result.out).at("multi_turn");
  EXPECT_EQ(multi_turn.at("requests"), 4);
  EXPECT_EQ(multi_turn.at("prefix_cache").at("cached_tokens"), 0);
}

TEST_F(BenchMultiTurn, MistakesAreRefusedWithAReason) {
  const auto refused = [&](const std::string& args, const std::string& reason) {
    const testing::BenchRun result = bench(args);
    EXPECT_EQ(result.exit_code, 1) << args;
    EXPECT_NE(result.err.find("tern: error: bench: " + reason), std::string::npos) << result.err;
  };
  refused("--num-turns 2", "--num-turns is read only with --dataset-name multi-turn");
  refused("--max-concurrency 2", "--max-concurrency is read only with --dataset-name multi-turn");
  refused("--dataset-name multi-turn --num-turns 0", "--num-turns must be at least 1, not 0");
  refused("--dataset-name multi-turn --max-concurrency 0", "--max-concurrency must be at least 1, not 0");
  refused("--dataset-name multi-turn --dataset-path " + (dir_ / "out").string(),
          "--dataset-path is read only with --dataset-name text");
  refused("--dataset-name multi-turn --num-turns 30 --input-len 20 --output-len 4",
          "a conversation of --num-turns 30 turns of --input-len 20 + --output-len 4 tokens reaches 720 tokens, more "
          "than the engine's context of 512 tokens");
}

}  // namespace
}  // namespace tern
