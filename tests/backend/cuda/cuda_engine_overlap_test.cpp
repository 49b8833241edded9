// Overlap scheduling on the GPU: the engine launches step N+1 before it reads step N's ids, whose tokens the CUDA
// backend fills in on the device (in replays of recorded decode steps, and in eager steps that sample on the
// device). The same requests run one step at a time must stream exactly the same tokens: ending only at max_tokens
// (known ahead), they make the same batches either way, so both runs launch the same kernels on the same inputs.
// (Stop tokens, EOS and n > 1 change batch compositions between the modes, where bf16 GEMMs of other shapes may
// flip near-ties; the CPU engine tests check those cases exactly.)
#include <gtest/gtest.h>

#include <map>
#include <random>

#include "backend/cuda/cuda_backend.h"
#include "engine/engine_core.h"
#include "engine/sharded_model.h"
#include "fixtures.h"

namespace tern {
namespace {

using testing::fixtures_dir;
using testing::read_json;

using Tokens = std::map<std::pair<uint64_t, int32_t>, std::vector<int32_t>>;

Tokens run(ShardedModel& model, bool overlap, const std::vector<std::pair<uint64_t, GenerateRequest>>& requests,
           EngineStats& stats) {
  EngineConfig config;
  config.num_kv_blocks = 256;
  config.max_num_seqs = 16;
  config.max_num_batched_tokens = 64;  // prompts chunked next to decodes
  config.overlap_schedule = overlap;
  config.log_kv_cache = false;
  EngineCore core(model, config);
  for (const auto& [id, request] : requests) core.add_request(id, request);
  Tokens tokens;
  while (core.has_unfinished_requests()) {
    for (const auto& out : core.step()) {
      auto& t = tokens[{out.request_id, out.index}];
      t.insert(t.end(), out.token_ids.begin(), out.token_ids.end());
    }
  }
  stats = core.stats();
  return tokens;
}

TEST(CudaEngineOverlapTest, OverlappedStepsStreamTheTokensOfStepsOneAtATime) {
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  const auto dir = fixtures_dir() / "models" / "llama";
  if (!std::filesystem::exists(dir / "golden.json")) GTEST_SKIP() << "fixture missing: " << dir;
  const auto golden = read_json(dir / "golden.json");
  auto model = ShardedModel::load(dir, "cuda");

  std::vector<std::pair<uint64_t, GenerateRequest>> requests;
  std::mt19937 rng(4);
  for (uint64_t id = 1; id <= 12; ++id) {
    GenerateRequest r;
    if (id <= golden["prompts"].size()) {
      r.prompt_token_ids = golden["prompts"][id - 1].get<std::vector<int32_t>>();
    } else {
      r.prompt_token_ids.resize(1 + id * 11 % 90);
      for (auto& t : r.prompt_token_ids) t = static_cast<int32_t>(rng() % model->config().vocab_size);
    }
    r.stop.max_tokens = 8 + static_cast<int32_t>(id * 5 % 40);
    r.stop.ignore_eos = true;
    if (id % 3 == 0) {  // sampled on the device: these steps run ahead too
      r.sampling.temperature = 0.9f;
      r.sampling.top_k = 40;
      r.sampling.top_p = 0.95f;
      r.sampling.seed = 100 + id;
    } else {
      r.sampling.temperature = 0.0f;
    }
    requests.emplace_back(id, r);
  }
  EngineStats sync_stats, overlap_stats;
  const Tokens reference = run(*model, false, requests, sync_stats);
  const Tokens overlapped = run(*model, true, requests, overlap_stats);
  EXPECT_EQ(overlapped, reference);
  EXPECT_EQ(overlap_stats.num_generated_tokens, sync_stats.num_generated_tokens);
  EXPECT_EQ(overlap_stats.num_finished_requests, sync_stats.num_finished_requests);
  EXPECT_EQ(overlap_stats.num_computed_tokens, sync_stats.num_computed_tokens);  // the same batches
  EXPECT_EQ(overlap_stats.num_free_kv_blocks, overlap_stats.num_kv_blocks);
}

}  // namespace
}  // namespace tern
