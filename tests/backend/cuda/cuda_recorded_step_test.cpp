// Recorded decode steps (CUDA graphs): every replay must give exactly the ids of the same step run eagerly (same
// kernels, same GEMM algorithms), across batch shapes that share the recorded memory pool and contexts that grow
// past split boundaries (the 40-token prompt passes 64 keys, where its batches plan a second share and record
// again); and the tokens must be the CPU backend's greedy tokens (on at least 2 of 3 prompts, as bf16 rounding may
// flip a near-tie), for a dense model and a MoE model.
#include "cuda_test_util.h"
#include "fixtures.h"
#include "model/model.h"
#include "model/sequence_runner.h"

namespace tern {
namespace {

using testing::fixtures_dir;
using testing::read_json;

constexpr int64_t kBlockSize = 16;
constexpr int kNewTokens = 40;

struct Sequence {
  std::vector<int32_t> tokens;  // prompt, then generated
  std::vector<std::vector<int32_t>> block_tables;  // per KV cache group, blocks of their own
  size_t prompt_len = 0;
};

std::vector<int32_t> eager_ids(Backend& backend, Model& model, KvCache& cache, const ForwardBatch& batch) {
  const auto step = backend.begin_step(batch);
  return backend.to_host_i32(backend.argmax(model.forward(*step, cache)));
}

class CudaRecordedStepTest : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaRecordedStepTest, ReplaysMatchEagerStepsAndCpuGreedy) {
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  const auto dir = fixtures_dir() / "models" / GetParam();
  if (!std::filesystem::exists(dir / "model.safetensors")) GTEST_SKIP() << "fixture missing: " << dir;
  auto gpu = make_cuda_backend(0);
  auto model = load_model(dir, *gpu);
  const auto golden = read_json(dir / "golden.json");
  ASSERT_GE(golden["prompts"].size(), 3u);

  KvCache cache = gpu->allocate_kv_cache(model->kv_layers(), 64, kBlockSize);
  // The tables of a step whose first new token is at `position`: a sliding-window group's blocks that lie wholly
  // before the window are -1, as the scheduler leaves them once freed.
  const auto tables_at = [&](const Sequence& seq, int32_t position) {
    auto tables = seq.block_tables;
    for (size_t g = 0; g < cache.groups.size(); ++g) {
      const int64_t window = cache.groups[g].sliding_window_tokens;
      if (window == 0) continue;
      for (size_t b = 0; b < tables[g].size(); ++b) {
        if (static_cast<int64_t>(b + 1) * kBlockSize <= position - window + 1) tables[g][b] = -1;
      }
    }
    return tables;
  };
  std::vector<Sequence> seqs(3);
  int32_t next_block = 0;
  ForwardBatch prefill;
  for (size_t s = 0; s < seqs.size(); ++s) {
    seqs[s].tokens = golden["prompts"][s].get<std::vector<int32_t>>();
    seqs[s].prompt_len = seqs[s].tokens.size();
    const int64_t max_len = static_cast<int64_t>(seqs[s].tokens.size()) + kNewTokens + 1;
    seqs[s].block_tables.resize(cache.groups.size());
    for (auto& table : seqs[s].block_tables) {
      for (int64_t b = 0; b < (max_len + kBlockSize - 1) / kBlockSize; ++b) table.push_back(next_block++);
    }
    ASSERT_LE(next_block, 64);
    prefill.token_ids.insert(prefill.token_ids.end(), seqs[s].tokens.begin(), seqs[s].tokens.end());
    prefill.sequences.push_back({0, static_cast<int32_t>(seqs[s].tokens.size()), seqs[s].block_tables});
    prefill.logit_rows.push_back(static_cast<int32_t>(prefill.token_ids.size() - 1));
  }
  const auto first = eager_ids(*gpu, *model, cache, prefill);
  for (size_t s = 0; s < seqs.size(); ++s) seqs[s].tokens.push_back(first[s]);

  const StepForward forward = [&](const StepContext& step) {
    return StepOutputs{gpu->argmax(model->forward(step, cache))};
  };
  for (int step = 1; step < kNewTokens; ++step) {
    // Three shapes in turn: all sequences, the first two, the last one.
    const size_t begin = step % 3 == 2 ? 2 : 0;
    const size_t end = step % 3 == 1 ? 2 : 3;
    ForwardBatch batch;
    for (size_t s = begin; s < end; ++s) {
      const int32_t cached = static_cast<int32_t>(seqs[s].tokens.size()) - 1;
      batch.token_ids.push_back(seqs[s].tokens.back());
      batch.sequences.push_back({cached, 1, tables_at(seqs[s], cached)});
      batch.logit_rows.push_back(static_cast<int32_t>(batch.token_ids.size() - 1));
    }
    // Both runs write the same keys and values to the same slots.
    const auto eager = eager_ids(*gpu, *model, cache, batch);
    const auto recorded = gpu->run_recorded_step(batch, forward);
    ASSERT_TRUE(recorded.has_value());
    ASSERT_EQ(gpu->to_host_i32(recorded->ids), eager) << "step " << step;
    for (size_t s = begin; s < end; ++s) seqs[s].tokens.push_back(eager[s - begin]);
  }

  // A MoE model's free-running tokens part from the CPU backend's where bf16 swaps a near-tied expert
  // (cuda_model_test compares its whole forward with every expert routed instead).
  if (model->config().raw.contains("num_experts_per_tok")) return;
  auto cpu = make_cpu_backend(2);
  auto cpu_model = load_model(dir, *cpu);
  int equal = 0;
  for (const auto& seq : seqs) {
    const std::vector<int32_t> prompt(seq.tokens.begin(), seq.tokens.begin() + seq.prompt_len);
    const std::vector<int32_t> ours(seq.tokens.begin() + seq.prompt_len, seq.tokens.end());
    equal += ours == greedy_generate(*cpu_model, *cpu, prompt, static_cast<int64_t>(ours.size()));
  }
  EXPECT_GE(equal, 2) << "greedy tokens equal the CPU backend's on " << equal << " of 3 prompts";
}

// qwen3_moe: the expert grouping, grouped GEMMs and combine run inside the recorded graph, with no host sync;
// gpt_oss: two KV cache groups (block tables of both in the recorded metadata), a window of 8 tokens;
// deepseek_v3: MLA's split-KV latent attention, its combine and the grouped GEMMs inside the recorded graph;
// deepseek_v4: mHC, the compressors, the indexer's top-k and compressed attention reading the step's positions and
// block tables from the recorded metadata, windows closing at replays (rates 4 and 8).
INSTANTIATE_TEST_SUITE_P(Models, CudaRecordedStepTest,
                         ::testing::Values("llama", "qwen3_moe", "gpt_oss", "deepseek_v3", "deepseek_v4"));

TEST(CudaRecordedStepDeviceTest, ReportsDeviceMemory) {
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  auto gpu = make_cuda_backend(0);
  const auto memory = gpu->device_memory();
  ASSERT_TRUE(memory.has_value());
  EXPECT_GT(memory->total_bytes, 0);
  EXPECT_GT(memory->free_bytes, 0);
  EXPECT_LE(memory->free_bytes, memory->total_bytes);
  EXPECT_FALSE(make_cpu_backend(1)->device_memory().has_value());
}

}  // namespace
}  // namespace tern
