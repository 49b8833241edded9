// Tensor parallelism over NCCL on two or more GPUs (skipped with fewer): the collectives against their
// definitions, and sharded fixture models against the same model on one GPU, through the engine (recorded
// decode steps included), with the KV cache split over the GPUs by decode context parallelism too; and
// data-parallel attention with expert parallelism (the MoE tokens exchanged all-to-all, every step eager).
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <exception>
#include <functional>
#include <map>
#include <ostream>

#include <cuda_runtime.h>

#include <cstdio>
#include <thread>

#include "backend/cuda/cuda_backend.h"
#include "core/error.h"
#include "engine/engine_core.h"
#include "engine/sharded_model.h"
#include "cuda_test_util.h"
#include "fixtures.h"
#include "model/layers/sparse_moe.h"
#include "model/sequence_runner.h"
#include "sharded_greedy.h"

namespace tern {
namespace {

using testing::every_expert_routed;
using testing::fixtures_dir;
using testing::read_json;
using testing::sharded_greedy_tokens;

int num_gpus() {
  if (!cuda_device_available()) return 0;
  int count = 0;
  cudaGetDeviceCount(&count);
  return count;
}

TEST(CudaTensorParallelTest, CollectivesMatchTheirDefinitions) {
  if (num_gpus() < 2) GTEST_SKIP() << "needs 2 GPUs, " << num_gpus() << " found";
  // The ranks' backends without a model, each made and driven on a thread of its own (as ShardedModel does).
  auto group = make_cuda_backend_group(2);
  std::vector<std::unique_ptr<Backend>> backends(2);
  std::vector<std::vector<float>> reduced(2), gathered(2);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      backends[rank] = group->make(rank);
      Backend& backend = *backends[rank];
      // Small integers: the sums are exact.
      std::vector<float> values(1000);
      for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>((i % 7) + rank * 10);
      Tensor x = backend.from_host_f32(values, {10, 100});
      backend.all_reduce_sum(x);
      reduced[rank] = backend.to_host_f32(x);
      std::vector<float> shard(6);
      for (size_t i = 0; i < shard.size(); ++i) shard[i] = static_cast<float>(rank * 100 + i);
      gathered[rank] = backend.to_host_f32(backend.all_gather_columns(backend.from_host_f32(shard, {2, 3}), 5));
    });
  }
  for (auto& thread : threads) thread.join();
  for (int rank = 0; rank < 2; ++rank) {
    for (size_t i = 0; i < 1000; ++i) {
      ASSERT_EQ(reduced[rank][i], static_cast<float>(2 * (i % 7) + 10)) << "rank " << rank << " element " << i;
    }
    EXPECT_EQ(gathered[rank], (std::vector<float>{0, 1, 2, 100, 101, 3, 4, 5, 103, 104})) << "rank " << rank;
  }
  threads.clear();
  for (int rank = 0; rank < 2; ++rank) threads.emplace_back([&, rank] { backends[rank].reset(); });
  for (auto& thread : threads) thread.join();
}

// Makes and drives the two ranks' backends of a CUDA group without a model, each on a thread of its own (as
// ShardedModel does), and releases them on those threads.
class TwoRanks {
 public:
  TwoRanks() : group_(make_cuda_backend_group(2)) {
    run([&](int rank) { backends_[rank] = group_->make(rank); });
  }
  ~TwoRanks() {
    run([&](int rank) { backends_[rank].reset(); });
  }
  Backend& backend(int rank) { return *backends_[rank]; }
  // Runs work(rank) on both ranks at once; rethrows the first rank's error after both finish.
  void run(const std::function<void(int)>& work) {
    std::exception_ptr errors[2];
    std::vector<std::thread> threads;
    for (int rank = 0; rank < 2; ++rank) {
      threads.emplace_back([&, rank] {
        try {
          work(rank);
        } catch (...) {
          errors[rank] = std::current_exception();
        }
      });
    }
    for (auto& thread : threads) thread.join();
    for (const auto& error : errors) {
      if (error) std::rethrow_exception(error);
    }
  }

 private:
  std::unique_ptr<BackendGroup> group_;
  std::unique_ptr<Backend> backends_[2];
};


// No rows of `dtype` and `width`, as a data-parallel rank without tokens sends.
Tensor no_rows(DType dtype, int64_t width) {
  Tensor none;
  none.dtype = dtype;
  none.shape = {0, width};
  return none;
}

// Rank 0 sends its row 0 to itself and rows 1, 2 to rank 1; rank 1 sends its rows 0..2 to rank 0 and none to
// itself. Row r of rank k holds k * 100 + r * 10 + column. Then rank 1 has nothing to send at all (an empty
// tensor, as a data-parallel rank without tokens passes).
TEST(CudaTensorParallelTest, AllToAllRowsMatchesItsDefinition) {
  if (num_gpus() < 2) GTEST_SKIP() << "needs 2 GPUs, " << num_gpus() << " found";
  TwoRanks ranks;
  constexpr int64_t kColumns = 5;
  const auto rows_of = [&](int rank) {
    std::vector<float> values;
    for (int r = 0; r < 3; ++r) {
      for (int c = 0; c < kColumns; ++c) values.push_back(static_cast<float>(rank * 100 + r * 10 + c));
    }
    return values;
  };
  const auto expected_rows = [&](std::vector<std::pair<int, int>> sources) {  // (rank, row) in order
    std::vector<float> values;
    for (auto [rank, row] : sources) {
      for (int c = 0; c < kColumns; ++c) values.push_back(static_cast<float>(rank * 100 + row * 10 + c));
    }
    return values;
  };
  const std::vector<int64_t> send_counts[2] = {{1, 2}, {3, 0}};
  const std::vector<float> expected[2] = {expected_rows({{0, 0}, {1, 0}, {1, 1}, {1, 2}}),
                                          expected_rows({{0, 1}, {0, 2}})};
  const std::vector<int64_t> expected_counts[2] = {{1, 3}, {2, 0}};
  ranks.run([&](int rank) {
    Backend& backend = ranks.backend(rank);
    const std::vector<float> values = rows_of(rank);
    std::vector<int64_t> counts;
    // Every dtype the exchange sends: bf16 hidden states, int32 expert slots, float32 weights (3-D rows too).
    const Tensor bf16 = backend.all_to_all_rows(testing::bf16_tensor(backend, values, {3, kColumns}), send_counts[rank], counts);
    EXPECT_EQ(bf16.dtype, DType::BF16);
    EXPECT_EQ(bf16.shape, (std::vector<int64_t>{expected_counts[rank][0] + expected_counts[rank][1], kColumns}));
    EXPECT_EQ(backend.to_host_f32(bf16), expected[rank]) << "bf16 rows, rank " << rank;
    EXPECT_EQ(counts, expected_counts[rank]) << "rank " << rank;
    std::vector<int32_t> ids(values.begin(), values.end());
    const Tensor i32 = backend.all_to_all_rows(backend.from_host_i32(ids, {3, kColumns}), send_counts[rank], counts);
    const std::vector<int32_t> expected_ids(expected[rank].begin(), expected[rank].end());
    EXPECT_EQ(backend.to_host_i32(i32), expected_ids) << "int32 rows, rank " << rank;
    std::vector<float> wide;
    for (float v : values) wide.insert(wide.end(), {v, -v});
    const Tensor f32 =
        backend.all_to_all_rows(backend.from_host_f32(wide, {3, kColumns, 2}), send_counts[rank], counts);
    std::vector<float> expected_wide;
    for (float v : expected[rank]) expected_wide.insert(expected_wide.end(), {v, -v});
    EXPECT_EQ(f32.shape[2], 2);
    EXPECT_EQ(backend.to_host_f32(f32), expected_wide) << "float32 rows, rank " << rank;

    // Rank 1 idle: it sends an empty tensor and still receives rank 0's rows.
    const Tensor idle = rank == 0 ? testing::bf16_tensor(backend, values, {3, kColumns}) : no_rows(DType::BF16, kColumns);
    const std::vector<int64_t> idle_counts = rank == 0 ? std::vector<int64_t>{1, 2} : std::vector<int64_t>{0, 0};
    const Tensor got = backend.all_to_all_rows(idle, idle_counts, counts);
    EXPECT_EQ(backend.to_host_f32(got), rank == 0 ? expected_rows({{0, 0}}) : expected_rows({{0, 1}, {0, 2}}));
    EXPECT_EQ(counts, rank == 0 ? (std::vector<int64_t>{1, 0}) : (std::vector<int64_t>{2, 0})) << "rank " << rank;
  });
}

// Rows of different sizes would make NCCL's byte counts disagree between the pair (a hang or a corrupt buffer):
// both ranks see every rank's row size in the count exchange and fail naming it.
TEST(CudaTensorParallelTest, AllToAllRowsRefusesRanksSendingDifferentRowSizes) {
  if (num_gpus() < 2) GTEST_SKIP() << "needs 2 GPUs, " << num_gpus() << " found";
  TwoRanks ranks;
  int failures[2] = {0, 0};
  ranks.run([&](int rank) {
    Backend& backend = ranks.backend(rank);
    // Rank 0 sends bf16 rows of 4, rank 1 no rows of float32: 8 bytes a row against 16.
    const Tensor x = rank == 0 ? testing::bf16_tensor(backend, std::vector<float>(8, 1.0f), {2, 4}) : no_rows(DType::F32, 4);
    std::vector<int64_t> counts;
    try {
      backend.all_to_all_rows(x, rank == 0 ? std::vector<int64_t>{1, 1} : std::vector<int64_t>{0, 0}, counts);
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("every rank must send one dtype and width"), std::string::npos) << e.what();
      ++failures[rank];
    }
  });
  EXPECT_EQ(failures[0], 1);
  EXPECT_EQ(failures[1], 1);
}

// Data-parallel ranks run every step eagerly: the backend declines to record (nullopt, without running the step),
// so the engine's runners take the eager path, which the MoE token exchange's host reads need.
TEST(CudaTensorParallelTest, DataParallelStepsAreNotRecorded) {
  if (num_gpus() < 2) GTEST_SKIP() << "needs 2 GPUs, " << num_gpus() << " found";
  TwoRanks ranks;
  ranks.run([&](int rank) {
    Backend& backend = ranks.backend(rank);
    ForwardBatch batch;
    batch.token_ids = {0};
    batch.sequences.push_back({0, 1, {{0}}});
    batch.logit_rows = {0};
    int runs = 0;
    const Tensor logits = backend.from_host_f32(std::vector<float>{0, 1, 2, 3, 4, 9, 0, 0}, {1, 8});
    const StepForward forward = [&](const StepContext&) {
      ++runs;
      return StepOutputs{backend.argmax(logits)};
    };
    backend.set_data_parallel(true);
    EXPECT_FALSE(backend.run_recorded_step(batch, forward).has_value()) << "rank " << rank;
    EXPECT_EQ(runs, 0);
    // The same group without data parallelism (tensor-parallel ranks) records.
    backend.set_data_parallel(false);
    const auto recorded = backend.run_recorded_step(batch, forward);
    ASSERT_TRUE(recorded.has_value()) << "rank " << rank;
    EXPECT_EQ(backend.to_host_i32(recorded->ids), (std::vector<int32_t>{5}));
  });
}

struct ShardedCase {
  std::string model;
  int expert_parallel_size = 1;
  bool data_parallel = false;  // attention data-parallel over the two GPUs (tensor-parallel size 1)
};

void PrintTo(const ShardedCase& c, std::ostream* os) {
  *os << c.model << ", expert parallel size " << c.expert_parallel_size << (c.data_parallel ? ", data parallel" : "");
}

// Test names: the model, then "ep2" where experts are split and "dp2" where attention is data-parallel.
std::string case_name(const ::testing::TestParamInfo<ShardedCase>& info) {
  std::string name = info.param.model;
  for (char& c : name) c = std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  if (info.param.data_parallel) name += "_dp2";
  return info.param.expert_parallel_size > 1 ? name + "_ep" + std::to_string(info.param.expert_parallel_size) : name;
}

ParallelConfig two_gpus(const ShardedCase& c) {
  if (c.data_parallel) return {.expert_parallel_size = 2, .data_parallel_size = 2};
  return {.tensor_parallel_size = 2, .expert_parallel_size = c.expert_parallel_size};
}

class CudaShardedModelTest : public ::testing::TestWithParam<ShardedCase> {};

// bf16 sums in another order may flip a near-tie, as between the CPU and CUDA backends: every prompt but one must
// match over 64 steps.
TEST_P(CudaShardedModelTest, TwoGpusGiveTheGreedyTokensOfOne) {
  if (num_gpus() < 2) GTEST_SKIP() << "needs 2 GPUs, " << num_gpus() << " found";
  const std::string& name = GetParam().model;
  const auto dir = fixtures_dir() / "models" / name;
  if (!std::filesystem::exists(dir / "golden.json")) GTEST_SKIP() << "fixture missing: " << dir;
  const auto golden = read_json(dir / "golden.json");
  auto one = ShardedModel::load(dir, "cuda");
  auto two = ShardedModel::load(dir, "cuda", two_gpus(GetParam()));
  size_t equal = 0;
  const size_t num_prompts = golden["prompts"].size();
  for (size_t p = 0; p < num_prompts; ++p) {
    const auto prompt = golden["prompts"][p].get<std::vector<int32_t>>();
    const auto expected = sharded_greedy_tokens(*one, prompt, 64);
    const auto got = sharded_greedy_tokens(*two, prompt, 64);
    equal += got == expected;
    if (got != expected) std::printf("%s prompt %zu: tokens differ between 1 and 2 GPUs\n", name.c_str(), p);
  }
  EXPECT_GE(equal + 1, num_prompts);
}

INSTANTIATE_TEST_SUITE_P(Dense, CudaShardedModelTest,
                         ::testing::Values(ShardedCase{"llama"}, ShardedCase{"llama3_rope"}, ShardedCase{"qwen2"},
                                           ShardedCase{"qwen3"}, ShardedCase{"qwen3-chat-tiny"}),
                         case_name);
// Experts split over the two GPUs (each computes its half of the experts for every token, then an all-reduce).
INSTANTIATE_TEST_SUITE_P(ExpertParallel, CudaShardedModelTest,
                         ::testing::Values(ShardedCase{"qwen3_moe", 2}, ShardedCase{"mixtral", 2}), case_name);
// Attention data-parallel, experts split: one request runs on rank 0 while rank 1 only serves its experts.
// deepseek_v3 adds shared experts (added to the exchanged sum) and MLA.
const auto kDataParallelCases = ::testing::Values(ShardedCase{"qwen3_moe", 2, true}, ShardedCase{"mixtral", 2, true},
                                                  ShardedCase{"deepseek_v3", 2, true});
INSTANTIATE_TEST_SUITE_P(DataParallel, CudaShardedModelTest, kDataParallelCases, case_name);

class CudaDataParallelTest : public ::testing::TestWithParam<ShardedCase> {
 protected:
  void SetUp() override {
    if (num_gpus() < 2) GTEST_SKIP() << "needs 2 GPUs, " << num_gpus() << " found";
    dir = fixtures_dir() / "models" / GetParam().model;
    if (!std::filesystem::exists(dir / "golden.json")) GTEST_SKIP() << "fixture missing: " << dir;
  }
  std::filesystem::path dir;
};


// max |a - b| / max |b|
double relative_error(const std::vector<float>& a, const std::vector<float>& b) {
  double max_diff = 0, max_ref = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    if (std::isnan(a[i])) return INFINITY;
    max_diff = std::max(max_diff, std::abs(double(a[i]) - b[i]));
    max_ref = std::max(max_ref, std::abs(double(b[i])));
  }
  return max_ref > 0 ? max_diff / max_ref : max_diff;
}

// Every expert routed (no near-tied choice to flip), so the ranks' logits differ from one GPU's only by where the
// experts' sums are rounded to bf16: within the 2e-2 the CUDA backend keeps to the CPU's (cuda_model_test). Two
// prompts of different lengths on the two ranks at once, then one prompt with rank 1 idle: a token combined into
// the wrong row, a row sent to the wrong rank or an expert's part added twice or not at all is far outside it.
TEST_P(CudaDataParallelTest, LogitsOfSequencesOnBothRanksMatchOneGpu) {
  const auto every = every_expert_routed(dir, GetParam().model + "_dp");
  auto one = ShardedModel::load(every, "cuda");
  auto two = ShardedModel::load(every, "cuda", two_gpus(GetParam()));
  ASSERT_TRUE(two->data_parallel());
  const auto golden = read_json(dir / "golden.json");
  const auto prompt = [&](size_t p) { return golden["prompts"][p].get<std::vector<int32_t>>(); };
  ASSERT_GE(golden["prompts"].size(), 3u);
  for (const auto& batch : {std::vector<std::vector<int32_t>>{prompt(0), prompt(1)},
                            std::vector<std::vector<int32_t>>{prompt(2)}}) {
    const auto got = testing::logits_on_ranks(*two, batch);
    for (size_t p = 0; p < batch.size(); ++p) {
      const auto expected = testing::logits_on_ranks(*one, {batch[p]})[0];
      ASSERT_EQ(got[p].size(), expected.size());
      EXPECT_LE(relative_error(got[p], expected), 2e-2)
          << GetParam().model << ": prompt of " << batch[p].size() << " tokens on rank " << p;
    }
  }
  two.reset();
  one.reset();
  std::filesystem::remove_all(every);
}

// The golden prompts at once through the engine: the ranks hold different sequences (placed by load), each
// rank's MoE layers take the other's tokens, steps run eagerly, overlapped. Every prompt but one must give one
// GPU's greedy tokens for the same concurrent requests (bf16 rounding may flip a near-tie, as for the cases above).
TEST_P(CudaDataParallelTest, ConcurrentRequestsGiveOneGpusGreedyTokens) {
  const auto golden = read_json(dir / "golden.json");
  const auto run = [&](ShardedModel& model) {
    EngineConfig config;
    config.num_kv_blocks = 64;
    config.max_num_seqs = 8;
    config.max_num_batched_tokens = 512;
    config.overlap_schedule = true;  // each rank's tokens in flight come from its own sampled ids
    config.log_kv_cache = false;
    EngineCore core(model, config);
    for (size_t p = 0; p < golden["prompts"].size(); ++p) {
      GenerateRequest request;
      request.prompt_token_ids = golden["prompts"][p].get<std::vector<int32_t>>();
      request.sampling.temperature = 0.0f;
      request.stop.max_tokens = 32;
      request.stop.ignore_eos = true;
      core.add_request(p + 1, std::move(request));
    }
    std::map<uint64_t, std::vector<int32_t>> tokens;
    while (core.has_unfinished_requests()) {
      for (const auto& out : core.step()) {
        tokens[out.request_id].insert(tokens[out.request_id].end(), out.token_ids.begin(), out.token_ids.end());
      }
    }
    return tokens;
  };
  auto one = ShardedModel::load(dir, "cuda");
  auto two = ShardedModel::load(dir, "cuda", two_gpus(GetParam()));
  const auto expected = run(*one);
  const auto got = run(*two);
  ASSERT_EQ(got.size(), expected.size());
  size_t equal = 0;
  for (const auto& [id, tokens] : expected) {
    ASSERT_EQ(got.at(id).size(), tokens.size()) << "request " << id;
    equal += got.at(id) == tokens;
    if (got.at(id) != tokens) std::printf("%s request %llu: tokens differ\n", GetParam().model.c_str(),
                                         static_cast<unsigned long long>(id));
  }
  EXPECT_GE(equal + 1, expected.size());
}

INSTANTIATE_TEST_SUITE_P(DataParallel, CudaDataParallelTest, kDataParallelCases, case_name);


class CudaDecodeContextParallelTest : public ::testing::TestWithParam<std::string> {};

// Each GPU caches every other token and runs every attention head over its tokens; the partial attentions merged
// by their log-sum-exps give one GPU's logits (bf16 sums in another order: within 2e-2 of the largest, as the
// CUDA backend's logits against the golden ones) and greedy tokens (every prompt but one, as for tensor
// parallelism), with blocks of 16 slots per GPU and of 2 (logical blocks of 4 tokens: prompts over many blocks).
TEST_P(CudaDecodeContextParallelTest, TwoGpusGiveTheLogitsAndGreedyTokensOfOne) {
  if (num_gpus() < 2) GTEST_SKIP() << "needs 2 GPUs, " << num_gpus() << " found";
  const std::string& name = GetParam();
  const auto dir = fixtures_dir() / "models" / name;
  if (!std::filesystem::exists(dir / "golden.json")) GTEST_SKIP() << "fixture missing: " << dir;
  const auto golden = read_json(dir / "golden.json");
  auto one = ShardedModel::load(dir, "cuda");
  auto two = ShardedModel::load(dir, "cuda", {.tensor_parallel_size = 2, .decode_context_parallel_size = 2});
  for (int rank = 0; rank < 2; ++rank) {
    ASSERT_EQ(two->backend(rank).kv_context_shard().rank, rank);
    ASSERT_EQ(two->backend(rank).kv_context_shard().size, 2);
  }
  const size_t num_prompts = golden["prompts"].size();
  size_t equal = 0, equal_small_blocks = 0;
  for (size_t p = 0; p < num_prompts; ++p) {
    const auto prompt = golden["prompts"][p].get<std::vector<int32_t>>();
    const auto expected_logits = testing::prompt_logits(*one, prompt);
    const auto logits = testing::prompt_logits(*two, prompt);
    ASSERT_EQ(logits.size(), expected_logits.size());
    float max_diff = 0.0f, max_ref = 0.0f;
    for (size_t i = 0; i < logits.size(); ++i) {
      max_diff = std::max(max_diff, std::abs(logits[i] - expected_logits[i]));
      max_ref = std::max(max_ref, std::abs(expected_logits[i]));
    }
    EXPECT_LE(max_diff, 2e-2f * max_ref) << name << " prompt " << p;
    const auto expected = sharded_greedy_tokens(*one, prompt, 64);
    const auto got = sharded_greedy_tokens(*two, prompt, 64);
    equal += got == expected;
    if (got != expected) std::printf("%s prompt %zu: tokens differ between 1 and 2 GPUs\n", name.c_str(), p);
    const auto got_small_blocks = sharded_greedy_tokens(*two, prompt, 64, 0, 2);
    equal_small_blocks += got_small_blocks == expected;
    if (got_small_blocks != expected) {
      std::printf("%s prompt %zu: tokens differ between 1 GPU and 2 with blocks of 2\n", name.c_str(), p);
    }
  }
  EXPECT_GE(equal + 1, num_prompts);
  EXPECT_GE(equal_small_blocks + 1, num_prompts);
}

INSTANTIATE_TEST_SUITE_P(Dense, CudaDecodeContextParallelTest, ::testing::Values("llama", "qwen2", "qwen3"));
// MLA: each GPU caches every other token's latent instead of every token's.
INSTANTIATE_TEST_SUITE_P(Mla, CudaDecodeContextParallelTest, ::testing::Values("deepseek_v3"));

}  // namespace
}  // namespace tern
