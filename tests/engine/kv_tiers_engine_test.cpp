// The KV cache's host and disk tiers end to end on the fixture models (CPU backend): multi-turn conversations whose
// histories outgrow the device pool give the same greedy tokens with the tiers on and off, hit the lower tiers, and
// leak no block; a restarted engine finds its prefix cache on disk and skips a corrupted file.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <random>

#include <unistd.h>

#include "core/error.h"
#include "backend/kv_block_transfer.h"
#include "engine/engine_core.h"
#include "engine/sharded_model.h"
#include "fixtures.h"
#include "fixture_model.h"
#include "greedy_request.h"

namespace tern {
namespace {

using testing::greedy;
using testing::load_fixture_model;

constexpr int32_t kDevicePoolBlocks = 20;  // 320 tokens; the conversations hold about 1,500

struct Tiers {
  const char* name;
  int64_t host_bytes = 0;
  bool write_through = false;
  bool disk = false;
  bool overlap = false;
};

EngineConfig config_for(const Tiers& tiers, const std::filesystem::path& disk_dir, int64_t block_bytes,
                        KvCacheDtype kv_dtype = KvCacheDtype::automatic) {
  EngineConfig c;
  c.kv_cache_dtype = kv_dtype;
  c.num_kv_blocks = kDevicePoolBlocks;
  c.max_num_batched_tokens = 128;
  c.max_num_seqs = 4;
  c.log_kv_cache = false;
  c.overlap_schedule = tiers.overlap;
  c.host_kv_cache_bytes = tiers.host_bytes * block_bytes;  // in blocks here
  c.kv_write_through = tiers.write_through;
  if (tiers.disk) {
    c.kv_cache_dir = disk_dir.string();
    c.model_identity = "kv tiers test";
  }
  return c;
}

struct Conversations {
  std::vector<std::vector<int32_t>> outputs;  // per request, in submission order
  EngineStats stats;
};

// Six conversations of four turns: each turn's prompt is the previous prompt, its answer and a new message; a round
// submits one turn of every conversation and runs it to the end.
Conversations converse(ShardedModel& model, const EngineConfig& config) {
  EngineCore core(model, config);
  std::mt19937 rng(3);
  const auto vocab = static_cast<int32_t>(std::min<int64_t>(model.config().vocab_size, 200));
  const bool data_parallel = model.data_parallel();
  const auto message = [&](int32_t len) {
    std::vector<int32_t> tokens(static_cast<size_t>(len));
    for (auto& t : tokens) t = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab));
    return tokens;
  };
  std::vector<std::vector<int32_t>> histories(6);
  Conversations out;
  uint64_t next_id = 1;
  for (int turn = 0; turn < 4; ++turn) {
    std::map<uint64_t, size_t> conversation_of;
    for (size_t c = 0; c < histories.size(); ++c) {
      const auto more = message(30 + static_cast<int32_t>(rng() % 40));
      histories[c].insert(histories[c].end(), more.begin(), more.end());
      conversation_of[next_id] = c;
      core.add_request(next_id++, greedy(histories[c], 6));
    }
    std::map<uint64_t, std::vector<int32_t>> answers;
    while (core.has_unfinished_requests()) {
      for (const auto& output : core.step()) {
        auto& tokens = answers[output.request_id];
        tokens.insert(tokens.end(), output.token_ids.begin(), output.token_ids.end());
      }
    }
    for (const auto& [id, tokens] : answers) {
      auto& history = histories[conversation_of.at(id)];
      history.insert(history.end(), tokens.begin(), tokens.end());
      out.outputs.push_back(tokens);
    }
  }
  out.stats = core.stats();
  for (int rank = 0; rank < (data_parallel ? model.size() : 1); ++rank) {
    const KvCacheManager& kv = core.kv_cache_manager(rank);
    EXPECT_EQ(kv.num_available_blocks(), kDevicePoolBlocks);
    EXPECT_EQ(kv.num_available_host_blocks(), kv.tier_stats().num_host_blocks);
  }
  return out;
}

std::filesystem::path fresh_dir(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() / ("tern-kv-tiers-" + name + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  return dir;
}

std::vector<int32_t> generate(EngineCore& core, const std::vector<int32_t>& prompt, uint64_t id,
                              int32_t max_tokens = 8) {
  core.add_request(id, greedy(prompt, max_tokens));
  std::vector<int32_t> tokens;
  while (core.has_unfinished_requests()) {
    for (const auto& output : core.step()) tokens.insert(tokens.end(), output.token_ids.begin(), output.token_ids.end());
  }
  return tokens;
}

class KvTiersArch : public ::testing::TestWithParam<std::string> {};

// Every tier configuration against none, on `model`.
void expect_tiers_change_nothing(ShardedModel& model, const std::string& name,
                                 KvCacheDtype kv_dtype = KvCacheDtype::automatic) {
  const auto dir = fresh_dir(name);
  const int64_t block_bytes =
      measure_kv_bytes_per_token(model.backend(0), model.model(0).kv_layers(), 16, kv_dtype) * 16;
  const Conversations off = converse(model, config_for({"off"}, dir, block_bytes, kv_dtype));
  for (const Tiers& tiers : {Tiers{"host, write-back", 200},
                             Tiers{"host, write-through", 200, true},
                             Tiers{"host, overlap scheduling", 200, false, false, true},
                             Tiers{"small host over disk", 4, false, true}}) {
    const Conversations on = converse(model, config_for(tiers, dir, block_bytes, kv_dtype));
    EXPECT_EQ(on.outputs, off.outputs) << tiers.name;
    EXPECT_GT(on.stats.prefix_hit_tokens, off.stats.prefix_hit_tokens) << tiers.name;
    EXPECT_GT(on.stats.prefix_host_hit_tokens + on.stats.prefix_disk_hit_tokens, 0) << tiers.name;
    EXPECT_GT(on.stats.kv_bytes_to_device, 0) << tiers.name;
    if (tiers.disk) {
      EXPECT_GT(on.stats.kv_disk_write_bytes, 0);
      EXPECT_EQ(on.stats.kv_disk_corrupt_records, 0);
    }
  }
  std::filesystem::remove_all(dir);
}

TEST_P(KvTiersArch, ConversationsGiveTheSameTokensWithTheTiersOnAndOff) {
  auto m = load_fixture_model(GetParam());
  ShardedModel model(*m.model, *m.backend);
  expect_tiers_change_nothing(model, GetParam());
}

// DeepSeek-V4 shares only its first 19 tokens (KvLayerSpec::shareable_prefix_tokens): less than a block.
INSTANTIATE_TEST_SUITE_P(Fixtures, KvTiersArch,
                         ::testing::Values("llama", "llama3_rope", "qwen2", "qwen3", "qwen3_moe", "mixtral",
                                           "deepseek_v3", "gpt_oss", "deepseek_v4"));

// An FP8 KV cache's tiers hold its codes: the host pool is its twin in e4m3, the disk records its bytes.
TEST(KvTiersFp8, AnFp8CacheTiersItsCodes) {
  for (const char* arch : {"llama", "deepseek_v4"}) {
    auto m = load_fixture_model(arch);
    ShardedModel model(*m.model, *m.backend);
    expect_tiers_change_nothing(model, std::string("fp8-") + arch, KvCacheDtype::fp8_e4m3);
  }
}

// Tensor-parallel ranks keep their shares of each block in host pools and disk files of their own; data-parallel
// ranks each have a tier of their own.
TEST(KvTiersParallel, TensorParallelRanksTierTheirShares) {
  for (const char* arch : {"llama", "deepseek_v3"}) {
    auto model = ShardedModel::load(testing::fixtures_dir() / "models" / arch, "cpu", {.tensor_parallel_size = 2}, 2);
    expect_tiers_change_nothing(*model, std::string("tp-") + arch);
  }
}

TEST(KvTiersParallel, DataParallelRanksTierTheirOwnSequences) {
  auto model = ShardedModel::load(testing::fixtures_dir() / "models" / "qwen3_moe", "cpu",
                                  {.expert_parallel_size = 2, .data_parallel_size = 2}, 2);
  expect_tiers_change_nothing(*model, "dp");
}

// Prefill/decode disaggregation exports a prompt's cached KV: blocks the device evicted to the host come back first,
// byte for byte.
TEST(KvTiersDisaggregation, AnExportLoadsTheHostBlocksBackFirst) {
  auto m = load_fixture_model("llama");
  std::vector<int32_t> document(100);
  for (size_t i = 0; i < document.size(); ++i) document[i] = static_cast<int32_t>((i * 13) % 200);
  EngineConfig config;
  config.num_kv_blocks = kDevicePoolBlocks;
  config.log_kv_cache = false;
  EngineCore kept(*m.model, *m.backend, config);
  config.host_kv_cache_bytes = int64_t{1} << 20;
  EngineCore tiered(*m.model, *m.backend, config);
  for (EngineCore* core : {&kept, &tiered}) generate(*core, document, 1);
  for (uint64_t id = 2; id < 6; ++id) generate(tiered, std::vector<int32_t>(150, static_cast<int32_t>(id)), id);
  const auto exported = tiered.export_prompt_kv(document, 0, 6);
  EXPECT_EQ(exported, kept.export_prompt_kv(document, 0, 6));
  EXPECT_EQ(kv_blocks_in_export(exported), 6);
  EXPECT_GT(tiered.stats().kv_bytes_to_device, 0);
}

TEST(KvTiersRestart, ARestartedEngineFindsItsPrefixCacheOnDiskAndSkipsACorruptFile) {
  auto m = load_fixture_model("llama");
  const auto dir = fresh_dir("restart");
  const int64_t block_bytes = measure_kv_bytes_per_token(*m.backend, m.model->kv_layers(), 16) * 16;
  const EngineConfig config = config_for({"disk", 16, false, true}, dir, block_bytes);
  std::vector<int32_t> document(200);
  for (size_t i = 0; i < document.size(); ++i) document[i] = static_cast<int32_t>((i * 37) % 250);
  std::vector<int32_t> first_answer;
  {
    EngineCore core(*m.model, *m.backend, config);
    first_answer = generate(core, document, 1);
    // Other prompts push the document's blocks out of the device (20 blocks) and the host pool (16), onto the disk.
    for (uint64_t id = 2; id < 8; ++id) {
      std::vector<int32_t> other(150, static_cast<int32_t>(id));
      generate(core, other, id);
    }
    EXPECT_GT(core.stats().kv_disk_write_bytes, 0);
  }
  {
    EngineCore core(*m.model, *m.backend, config);
    EXPECT_EQ(generate(core, document, 1), first_answer);
    EXPECT_GE(core.stats().prefix_disk_hit_tokens, 176);  // the whole blocks before the last token, from disk
  }
  // Flip a byte in the middle of every segment file: each record's checksum fails, nothing is served from them.
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir)) {
    if (!entry.is_regular_file()) continue;
    std::fstream file(entry.path(), std::ios::in | std::ios::out | std::ios::binary);
    const auto size = static_cast<std::streamoff>(std::filesystem::file_size(entry.path()));
    for (std::streamoff at = 4096; at < size; at += 4096) {
      file.seekg(at);
      const char byte = static_cast<char>(file.get());
      file.seekp(at);
      file.put(static_cast<char>(byte ^ 0x5a));
    }
  }
  {
    EngineCore core(*m.model, *m.backend, config);
    EXPECT_GT(core.stats().kv_disk_corrupt_records, 0);
    EXPECT_EQ(generate(core, document, 1), first_answer);
  }
  std::filesystem::remove_all(dir);
}

// Ten thousand requests over shared documents through a small device pool, a smaller host pool and the disk: every
// pool is back to its baseline at the end (free, or held by the prefix cache alone), and the answers of a sample
// equal those of an engine without tiers.
TEST(KvTiersLeaks, TenThousandRequestsLeaveNoBlockBehind) {
  auto m = load_fixture_model("llama");
  const auto dir = fresh_dir("leaks");
  const int64_t block_bytes = measure_kv_bytes_per_token(*m.backend, m.model->kv_layers(), 16) * 16;
  EngineConfig config = config_for({"leaks", 8, false, true}, dir, block_bytes);
  config.overlap_schedule = true;
  EngineCore core(*m.model, *m.backend, config);
  EngineCore plain(*m.model, *m.backend, config_for({"off"}, dir, block_bytes));
  std::mt19937 rng(17);
  std::map<uint64_t, std::vector<int32_t>> prompts;
  std::map<uint64_t, std::vector<int32_t>> answers;
  for (uint64_t id = 1; id <= 10000; ++id) {
    std::vector<int32_t> prompt(static_cast<size_t>(16 + rng() % 48));
    const auto document = static_cast<int32_t>(rng() % 16);
    for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = (document * 31 + static_cast<int32_t>(i) * 7) % 250;
    prompt.back() = static_cast<int32_t>(rng() % 250);
    core.add_request(id, greedy(prompt, 2));
    if (id % 500 == 0) prompts[id] = prompt;
    if (id % 50 == 0) {
      while (core.has_unfinished_requests()) {
        for (const auto& out : core.step()) {
          if (prompts.contains(out.request_id)) {
            auto& tokens = answers[out.request_id];
            tokens.insert(tokens.end(), out.token_ids.begin(), out.token_ids.end());
          }
        }
      }
    }
  }
  const KvCacheManager& kv = core.kv_cache_manager();
  EXPECT_EQ(kv.num_available_blocks(), kDevicePoolBlocks);
  EXPECT_EQ(kv.num_available_host_blocks(), 8);
  const EngineStats stats = core.stats();
  EXPECT_GT(stats.prefix_host_hit_tokens, 0);
  EXPECT_GT(stats.prefix_disk_hit_tokens, 0);
  for (const auto& [id, prompt] : prompts) EXPECT_EQ(answers[id], generate(plain, prompt, id, 2)) << "request " << id;
  std::filesystem::remove_all(dir);
}

TEST(KvTiersConfig, ImpossibleCombinationsAreRefusedByName) {
  auto m = load_fixture_model("llama");
  EngineConfig config;
  config.num_kv_blocks = 16;
  config.log_kv_cache = false;
  config.kv_cache_dir = "/tmp/never";
  EXPECT_THROW(EngineCore(*m.model, *m.backend, config), Error);  // a disk tier without a host tier
  config.kv_cache_dir.clear();
  config.host_kv_cache_bytes = 1 << 20;
  config.enable_prefix_cache = false;
  EXPECT_THROW(EngineCore(*m.model, *m.backend, config), Error);
  config.enable_prefix_cache = true;
  config.host_kv_cache_bytes = 10;  // less than a block
  EXPECT_THROW(EngineCore(*m.model, *m.backend, config), Error);
}

}  // namespace
}  // namespace tern
