// The KV cache's host tier on the CUDA backend: blocks copied to the pinned host twin and back hold the same bytes,
// and conversations whose earlier turns come back from the host (loaded layer by layer beside the step's compute)
// give exactly the tokens of the same conversations served from a device pool large enough to keep every turn.
// Skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>

#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/kv_block_transfer.h"
#include "engine/engine_core.h"
#include "engine/sharded_model.h"
#include "fixtures.h"

namespace tern {
namespace {

using testing::fixtures_dir;

TEST(CudaKvTiers, BlocksCopiedToTheHostAndBackKeepTheirBytes) {
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  auto gpu = make_cuda_backend(0);
  const std::vector<KvLayerSpec> layers{{.num_kv_heads = 2, .key_dim = 8, .value_dim = 8},
                                        {.num_kv_heads = 1, .key_dim = 16, .value_dim = 0}};
  KvCache device = gpu->allocate_kv_cache(layers, 8, 4);
  KvCache host = gpu->allocate_host_kv_cache(layers, 5, 4, KvCacheDtype::automatic);
  const std::vector<int32_t> sources{1, 2, 3, 6};
  auto crafted = gpu->export_kv_blocks(device, sources);
  const size_t payload = kv_payload_bytes(device, sources.size());
  std::mt19937 rng(5);
  for (size_t i = crafted.size() - payload; i < crafted.size(); ++i) crafted[i] = static_cast<uint8_t>(rng());
  gpu->import_kv_blocks(device, sources, crafted);

  const std::vector<int32_t> host_blocks{4, 0, 1, 3};
  gpu->copy_kv_blocks(device, sources, host, host_blocks);
  gpu->wait_kv_copies();
  // The host twin holds them as the device does: its export (through the same layout) is the same payload.
  std::vector<uint8_t> from_host(payload);
  copy_kv_blocks_out(host, host_blocks, from_host.data(),
                     [](const void* memory, void* out, size_t bytes) { std::memcpy(out, memory, bytes); });
  EXPECT_TRUE(std::equal(from_host.begin(), from_host.end(), crafted.end() - static_cast<std::ptrdiff_t>(payload)));

  const std::vector<int32_t> targets{7, 0, 4, 5};
  gpu->copy_kv_blocks(host, host_blocks, device, targets);
  const auto back = gpu->export_kv_blocks(device, targets);
  EXPECT_TRUE(std::equal(back.end() - static_cast<std::ptrdiff_t>(payload), back.end(),
                         crafted.end() - static_cast<std::ptrdiff_t>(payload)));
  EXPECT_GT(gpu->kv_copy_seconds(), 0.0);
}

struct Served {
  std::vector<std::vector<int32_t>> answers;
  EngineStats stats;
};

// Five conversations of three turns, one request at a time (so that both engines run the same batches).
Served converse(ShardedModel& model, int32_t num_blocks, int64_t host_bytes) {
  EngineConfig config;
  config.num_kv_blocks = num_blocks;
  config.max_num_batched_tokens = 64;
  config.max_num_seqs = 8;
  config.overlap_schedule = true;
  config.log_kv_cache = false;
  config.host_kv_cache_bytes = host_bytes;
  EngineCore core(model, config);
  std::mt19937 rng(9);
  std::vector<std::vector<int32_t>> histories(5);
  Served served;
  uint64_t id = 1;
  for (int turn = 0; turn < 3; ++turn) {
    for (auto& history : histories) {
      for (int i = 0; i < 40; ++i) history.push_back(static_cast<int32_t>(rng() % 200));
      GenerateRequest request;
      request.prompt_token_ids = history;
      request.sampling.temperature = 0.0f;
      request.stop.max_tokens = 6;
      request.stop.ignore_eos = true;
      core.add_request(id++, request);
      std::vector<int32_t> answer;
      while (core.has_unfinished_requests()) {
        for (const auto& out : core.step()) answer.insert(answer.end(), out.token_ids.begin(), out.token_ids.end());
      }
      history.insert(history.end(), answer.begin(), answer.end());
      served.answers.push_back(answer);
    }
  }
  served.stats = core.stats();
  return served;
}

class CudaKvTiersArch : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaKvTiersArch, TurnsLoadedFromTheHostGiveTheTokensOfTurnsKeptOnTheDevice) {
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  const auto dir = fixtures_dir() / "models" / GetParam();
  if (!std::filesystem::exists(dir / "config.json")) GTEST_SKIP() << "fixture missing: " << dir;
  auto model = ShardedModel::load(dir, "cuda");
  const Served kept = converse(*model, 256, 0);
  // 16 blocks hold one conversation's turn (gpt-oss: of both KV cache groups): earlier turns are evicted to the
  // host and loaded back.
  const Served loaded = converse(*model, 16, int64_t{64} << 20);
  EXPECT_EQ(loaded.answers, kept.answers);
  EXPECT_EQ(loaded.stats.prefix_hit_tokens, kept.stats.prefix_hit_tokens);
  EXPECT_GT(loaded.stats.prefix_host_hit_tokens, 0);
  EXPECT_GT(loaded.stats.kv_bytes_to_device, 0);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaKvTiersArch,
                         ::testing::Values("llama", "qwen3", "qwen3_moe", "mixtral", "deepseek_v3", "gpt_oss"));

}  // namespace
}  // namespace tern
