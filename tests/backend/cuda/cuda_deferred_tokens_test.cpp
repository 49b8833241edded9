// Overlap scheduling on the CUDA backend: tokens whose ids are still on the device (the previous step's sampled
// ids, never read by the host) are filled in by begin_step before the step's ops read them, in eager steps and in
// replays of recorded steps; the ids of a recorded step come back through to_host_i32_async.
#include "cuda_test_util.h"
#include "fixtures.h"
#include "model/model.h"

namespace tern {
namespace {

using testing::CudaVsCpuTest;
using testing::fixtures_dir;
using testing::read_json;

using CudaDeferredTokensTest = CudaVsCpuTest;

// The CPU backend fills deferred tokens in on the host (with_deferred_tokens); the GPU on the device. Both
// embeddings must read the same rows.
TEST_F(CudaDeferredTokensTest, EmbeddingReadsThePreviousStepsIds) {
  constexpr int64_t kVocab = 300, kHidden = 8, kRows = 5;
  std::vector<float> table(kVocab * kHidden);
  for (int64_t v = 0; v < kVocab; ++v) {
    for (int64_t h = 0; h < kHidden; ++h) table[v * kHidden + h] = bf16_to_f32(f32_to_bf16(static_cast<float>(v + h)));
  }
  const std::vector<int32_t> previous = {17, 256, 3, 200, 0};  // exact in bf16
  std::vector<float> logits(kRows * kVocab, 0.0f);
  for (int64_t r = 0; r < kRows; ++r) logits[r * kVocab + previous[r]] = 1.0f;
  ForwardBatch batch;
  batch.token_ids = {7, 0, 11, 0, 0, 0};
  batch.sequences = {{0, 2, {{0}}}, {4, 2, {{1}}}, {0, 1, {{2}}}, {9, 1, {{3}}}};
  batch.deferred_tokens = {{1, 3}, {3, 1}, {4, 0}, {5, 3}};
  const std::vector<int32_t> expected = {7, 200, 11, 256, 17, 200};
  ASSERT_EQ(with_deferred_tokens(batch, previous).token_ids, expected);

  for (Backend* backend : {cpu.get(), gpu.get()}) {
    batch.previous_sampled_ids = backend->argmax(backend->from_host_f32(logits, {kRows, kVocab}));
    const auto step = backend->begin_step(batch);
    const auto out = backend->to_host_f32(backend->embedding(weight_on(*backend, table, {kVocab, kHidden}), *step, {}));
    ASSERT_EQ(out.size(), expected.size() * kHidden) << backend->name();
    for (size_t t = 0; t < expected.size(); ++t) {
      EXPECT_EQ(out[t * kHidden], table[expected[t] * kHidden]) << backend->name() << " token " << t;
    }
  }
  batch.deferred_tokens = {{1, kRows}};
  EXPECT_THROW(gpu->begin_step(batch), Error);
}

// Greedy decoding of three prompts two ways on two CUDA backends of device 0: A replays recorded steps whose
// tokens are the previous replay's ids on the device (read back only through to_host_i32_async, after the next
// step was launched, as the overlap scheduler does); B runs eager steps with the ids read back first. Replays
// equal eager steps exactly (cuda_recorded_step_test), so the tokens must be equal.
TEST(CudaDeferredTokensRecordedTest, RecordedStepsChainedOnTheDeviceMatchHostDrivenSteps) {
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  const auto dir = fixtures_dir() / "models" / "llama";
  if (!std::filesystem::exists(dir / "model.safetensors")) GTEST_SKIP() << "fixture missing: " << dir;
  constexpr int64_t kBlockSize = 16;
  constexpr int kSteps = 12;
  const auto golden = read_json(dir / "golden.json");
  ASSERT_GE(golden["prompts"].size(), 3u);

  struct Run {
    std::unique_ptr<Backend> backend;
    std::unique_ptr<Model> model;
    KvCache cache;
  };
  std::vector<Run> runs(2);
  for (auto& run : runs) {
    run.backend = make_cuda_backend(0);
    run.model = load_model(dir, *run.backend);
    run.cache = run.backend->allocate_kv_cache(run.model->kv_layers(), 32, kBlockSize);
  }
  std::vector<std::vector<int32_t>> prompts, tables;
  ForwardBatch prefill;
  int32_t next_block = 0;
  for (size_t s = 0; s < 3; ++s) {
    prompts.push_back(golden["prompts"][s].get<std::vector<int32_t>>());
    const int64_t max_len = static_cast<int64_t>(prompts[s].size()) + kSteps + 1;
    tables.emplace_back();
    for (int64_t b = 0; b < (max_len + kBlockSize - 1) / kBlockSize; ++b) tables[s].push_back(next_block++);
    ASSERT_LE(next_block, 32);
    prefill.token_ids.insert(prefill.token_ids.end(), prompts[s].begin(), prompts[s].end());
    prefill.sequences.push_back({0, static_cast<int32_t>(prompts[s].size()), {tables[s]}});
    prefill.logit_rows.push_back(static_cast<int32_t>(prefill.token_ids.size() - 1));
  }
  const auto decode_batch = [&](int step) {
    ForwardBatch batch;
    for (size_t s = 0; s < 3; ++s) {
      batch.token_ids.push_back(0);
      batch.sequences.push_back({static_cast<int32_t>(prompts[s].size()) + step, 1, {tables[s]}});
      batch.logit_rows.push_back(static_cast<int32_t>(s));
    }
    return batch;
  };

  // A: only the ids of step k - 1 are read, after step k is launched.
  Run& a = runs[0];
  std::vector<std::vector<int32_t>> a_ids;
  Tensor previous = a.backend->argmax(a.model->forward(*a.backend->begin_step(prefill), a.cache));
  std::unique_ptr<PendingIds> pending = a.backend->to_host_i32_async(previous);
  const StepForward a_forward = [&](const StepContext& step) {
    return StepOutputs{a.backend->argmax(a.model->forward(step, a.cache))};
  };
  for (int step = 0; step < kSteps; ++step) {
    ForwardBatch batch = decode_batch(step);
    for (int32_t s = 0; s < 3; ++s) batch.deferred_tokens.push_back({s, s});
    batch.previous_sampled_ids = previous;
    auto ids = a.backend->run_recorded_step(batch, a_forward);
    ASSERT_TRUE(ids.has_value());
    previous = ids->ids;
    std::unique_ptr<PendingIds> next = a.backend->to_host_i32_async(previous);
    a_ids.push_back(pending->wait());
    pending = std::move(next);
  }
  a_ids.push_back(pending->wait());

  // B: the host reads every step's ids before it builds the next step.
  Run& b = runs[1];
  std::vector<std::vector<int32_t>> b_ids;
  b_ids.push_back(b.backend->to_host_i32(b.backend->argmax(b.model->forward(*b.backend->begin_step(prefill), b.cache))));
  for (int step = 0; step < kSteps; ++step) {
    ForwardBatch batch = decode_batch(step);
    batch.token_ids = b_ids.back();
    b_ids.push_back(b.backend->to_host_i32(b.backend->argmax(b.model->forward(*b.backend->begin_step(batch), b.cache))));
  }
  EXPECT_EQ(a_ids, b_ids);
}

}  // namespace
}  // namespace tern
