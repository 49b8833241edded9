// Speculative decoding on the GPU. Verify steps of greedy sequences replay recorded graphs (ModelRunner pads them
// to a batch-size bucket and a token count): a runner that records must give exactly the accepted tokens of one
// that runs every step eagerly (same kernels: chunks of up to 8 tokens take the decode attention either way),
// however the drafts fall among the sequences, and two recording runners on one backend must never replay each
// other's graphs. End to end, greedy outputs with n-gram and draft-model speculation (the draft model's steps
// launched back to back, recorded too) and with EAGLE-3 heads (eagle3_checkpoint.h: random heads, which drafts are
// rejected, and an oracle head over a copy of llama, which drafts are kept) equal those without.
#include <gtest/gtest.h>

#include <map>

#include "backend/cuda/cuda_backend.h"
#include "engine/engine_core.h"
#include "engine/model_runner.h"
#include "engine/sharded_model.h"
#include "eagle3_checkpoint.h"
#include "fixtures.h"
#include "greedy_request.h"
#include "model/sequence_runner.h"

namespace tern {
namespace {

using testing::fixtures_dir;
using testing::greedy;
using testing::read_json;

constexpr int32_t kBlockSize = 16;
constexpr int32_t kBlocksPerSequence = 12;
constexpr int kSteps = 24;

struct Sequence {
  uint64_t id = 0;
  std::vector<int32_t> tokens;  // prompt and accepted tokens; the last not yet computed
  std::vector<int32_t> reference;  // greedy continuation, the drafts' source
  int32_t prompt_len = 0;
};

class CudaVerifyStepTest : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaVerifyStepTest, RecordedVerifyStepsKeepTheDraftsOfEagerOnes) {
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  const auto dir = fixtures_dir() / "models" / GetParam();
  if (!std::filesystem::exists(dir / "golden.json")) GTEST_SKIP() << "fixture missing: " << dir;
  auto gpu = make_cuda_backend(0);
  auto model = load_model(dir, *gpu);
  const auto golden = read_json(dir / "golden.json");
  ASSERT_GE(golden["prompts"].size(), 3u);
  std::vector<Sequence> seqs(3);
  for (size_t s = 0; s < seqs.size(); ++s) {
    seqs[s].id = s + 1;
    seqs[s].tokens = golden["prompts"][s].get<std::vector<int32_t>>();
    seqs[s].prompt_len = static_cast<int32_t>(seqs[s].tokens.size());
    ASSERT_LE(seqs[s].tokens.size() + kSteps * 4 + 8, static_cast<size_t>(kBlocksPerSequence * kBlockSize));
  }
  // Each sequence owns kBlocksPerSequence blocks per KV cache group (gpt_oss's two groups share a block id's storage).
  const auto num_groups = static_cast<int32_t>(kv_cache_groups(model->kv_layers()).size());
  const auto num_blocks = static_cast<int32_t>(seqs.size()) * num_groups * kBlocksPerSequence;
  const auto tables = [&](size_t s) {
    return own_block_tables(num_groups, kBlocksPerSequence, static_cast<int64_t>(s) * num_groups * kBlocksPerSequence);
  };
  const auto cache = [&](int32_t extra) {
    return gpu->allocate_kv_cache(model->kv_layers(), num_blocks + extra, kBlockSize);
  };
  // Two recording runners (each with a scratch block past the pool), one that runs every step eagerly, and one
  // that decodes the greedy continuations the drafts come from.
  ModelRunner recorded_a(*model, *gpu, cache(1), num_blocks, 8);
  ModelRunner recorded_b(*model, *gpu, cache(1), num_blocks, 8);
  ModelRunner eager(*model, *gpu, cache(0));
  ModelRunner reference(*model, *gpu, cache(0));

  StepPlan prefill;
  for (size_t s = 0; s < seqs.size(); ++s) {
    SamplingParams params;
    params.temperature = 0.0f;
    prefill.new_sequences.push_back({seqs[s].id, params, 0, seqs[s].tokens});
    prefill.chunks.push_back({.sequence_id = seqs[s].id, .num_cached_tokens = 0, .token_ids = seqs[s].tokens,
                              .block_tables = tables(s), .sample = true, .num_prompt_tokens = seqs[s].prompt_len});
  }
  const auto run_all = [&](const StepPlan& plan) {
    const StepResult a = recorded_a.finish(recorded_a.launch(plan));
    const StepResult b = recorded_b.finish(recorded_b.launch(plan));
    const StepResult e = eager.finish(eager.launch(plan));
    const auto ids = [](const StepResult& r) {
      std::vector<std::pair<uint64_t, int32_t>> out;
      for (const auto& t : r.tokens) out.emplace_back(t.sequence_id, t.token_id);
      return out;
    };
    EXPECT_EQ(ids(a), ids(e));
    EXPECT_EQ(ids(b), ids(e));
    return e;
  };
  for (const auto& token : run_all(prefill).tokens) seqs[token.sequence_id - 1].tokens.push_back(token.token_id);
  // The reference continues each sequence one greedy token a step, from the same first token.
  for (const auto& token : reference.finish(reference.launch(prefill)).tokens) {
    seqs[token.sequence_id - 1].reference.push_back(token.token_id);
  }
  for (int t = 0; t < kSteps * 4; ++t) {
    StepPlan plan;
    for (size_t s = 0; s < seqs.size(); ++s) {
      const auto position = static_cast<int32_t>(seqs[s].tokens.size() - 1 + seqs[s].reference.size() - 1);
      plan.chunks.push_back({.sequence_id = seqs[s].id, .num_cached_tokens = position,
                             .token_ids = {seqs[s].reference.back()}, .block_tables = tables(s), .sample = true,
                             .num_prompt_tokens = seqs[s].prompt_len});
    }
    for (const auto& token : reference.finish(reference.launch(plan)).tokens) {
      seqs[token.sequence_id - 1].reference.push_back(token.token_id);
    }
  }

  int64_t kept = 0;
  int64_t drafted = 0;
  for (int step = 0; step < kSteps; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    StepPlan plan;
    // Batches of three, two and one sequence in turn; 0 to 3 drafts a sequence, from its greedy continuation with
    // every third step's last draft wrong, so that some drafts are kept and some are not.
    const size_t begin = step % 3 == 2 ? 2 : 0;
    const size_t end = step % 3 == 1 ? 2 : 3;
    for (size_t s = begin; s < end; ++s) {
      Sequence& seq = seqs[s];
      // reference[i] is generated token i, of which the sequence has `generated`.
      const auto generated = seq.tokens.size() - static_cast<size_t>(seq.prompt_len);
      const int32_t num_drafts = static_cast<int32_t>((step + s) % 4);
      std::vector<int32_t> chunk_tokens = {seq.tokens.back()};
      for (int32_t d = 0; d < num_drafts; ++d) {
        const size_t at = generated + static_cast<size_t>(d);
        chunk_tokens.push_back(at < seq.reference.size() ? seq.reference[at] : 0);
      }
      if (num_drafts > 0 && step % 3 == 0) chunk_tokens.back() = (chunk_tokens.back() + 1) % 7;
      drafted += num_drafts;
      plan.chunks.push_back({.sequence_id = seq.id, .num_cached_tokens = static_cast<int32_t>(seq.tokens.size()) - 1,
                             .token_ids = chunk_tokens, .block_tables = tables(s), .sample = true,
                             .num_draft_tokens = num_drafts, .num_prompt_tokens = seq.prompt_len});
    }
    const StepResult result = run_all(plan);
    for (const auto& token : result.tokens) seqs[token.sequence_id - 1].tokens.push_back(token.token_id);
    kept += static_cast<int64_t>(result.tokens.size()) - static_cast<int64_t>(end - begin);
  }
  // Drafts from the same model's greedy continuation are kept until a wrong one was put in, or a step of other
  // shapes rounded a near tie the other way, after which the sequence and its precomputed drafts part for good:
  // some are kept, and some are not.
  EXPECT_GT(kept, 0) << "of " << drafted << " drafts";
  EXPECT_LT(kept, drafted);
}

// Dense, MoE, two KV cache groups with a window, MLA, and DeepSeek-V4's compressors and indexer (chunks of several
// tokens crossing compression windows inside a replay).
INSTANTIATE_TEST_SUITE_P(Models, CudaVerifyStepTest,
                         ::testing::Values("llama", "qwen3_moe", "gpt_oss", "deepseek_v3", "deepseek_v4"));

using Tokens = std::map<std::pair<uint64_t, int32_t>, std::vector<int32_t>>;

Tokens generate(ShardedModel& model, std::optional<SpeculativeConfig> speculative,
                const std::vector<GenerateRequest>& requests, EngineStats& stats, bool overlap_schedule = false) {
  EngineConfig config;
  config.num_kv_blocks = 256;
  config.max_num_seqs = 16;
  config.log_kv_cache = false;
  config.speculative = std::move(speculative);
  config.overlap_schedule = overlap_schedule;
  EngineCore core(model, config);
  for (size_t i = 0; i < requests.size(); ++i) core.add_request(i + 1, requests[i]);
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

class CudaSpeculativeEngineTest : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaSpeculativeEngineTest, GreedyOutputsEqualThoseWithoutSpeculation) {
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  const auto dir = fixtures_dir() / "models" / GetParam();
  if (!std::filesystem::exists(dir / "golden.json")) GTEST_SKIP() << "fixture missing: " << dir;
  auto model = ShardedModel::load(dir, "cuda");
  const auto golden = read_json(dir / "golden.json");
  std::vector<GenerateRequest> requests;
  for (const auto& prompt : golden["prompts"]) requests.push_back(greedy(prompt.get<std::vector<int32_t>>(), 24));
  EngineStats stats;
  const Tokens expected = generate(*model, std::nullopt, requests, stats);
  for (int32_t k : {1, 3, 5}) {
    SpeculativeConfig ngram;
    ngram.method = SpeculativeMethod::kNgram;
    ngram.num_speculative_tokens = k;
    ngram.prompt_lookup_min = 1;
    ngram.prompt_lookup_max = 3;
    SpeculativeConfig self_draft;  // the model as its own draft: every draft is kept
    self_draft.method = SpeculativeMethod::kDraftModel;
    self_draft.num_speculative_tokens = k;
    self_draft.draft_model_dir = dir;
    for (const auto& speculative : {ngram, self_draft}) {
      // With overlap scheduling prompt lookup also drafts after a token in flight (a verify step launched before
      // the step in flight is read back).
      for (bool overlap : {false, true}) {
        const std::string what = std::string(speculative_method_name(speculative.method)) + " k=" +
                                 std::to_string(k) + (overlap ? ", overlap" : "");
        EXPECT_EQ(generate(*model, speculative, requests, stats, overlap), expected) << what;
        EXPECT_GT(stats.num_spec_drafts, 0) << what;
        if (speculative.method == SpeculativeMethod::kDraftModel) {
          EXPECT_EQ(stats.num_spec_accepted_tokens, stats.num_spec_draft_tokens) << what;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Models, CudaSpeculativeEngineTest, ::testing::Values("llama", "qwen3", "qwen3_moe", "gpt_oss"));

// Sampled requests (temperature, top-k, top-p, seeds) verify their drafts on the device (Backend::sample with the
// drafts in their rows; cuda_sampling_test checks the law): the same seeds give the same tokens, and some drafts are
// kept.
TEST(CudaSpeculativeSamplingTest, SeededSampledRequestsVerifyOnTheDeviceReproducibly) {
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  const auto dir = fixtures_dir() / "models" / "llama";
  if (!std::filesystem::exists(dir / "golden.json")) GTEST_SKIP() << "fixture missing: " << dir;
  auto model = ShardedModel::load(dir, "cuda");
  const auto golden = read_json(dir / "golden.json");
  std::vector<GenerateRequest> requests;
  uint64_t seed = 11;
  for (const auto& prompt : golden["prompts"]) {
    // The prompt three times over, so that prompt lookup finds drafts.
    const auto once = prompt.get<std::vector<int32_t>>();
    GenerateRequest request = greedy(once, 32);
    for (int r = 0; r < 2; ++r) request.prompt_token_ids.insert(request.prompt_token_ids.end(), once.begin(), once.end());
    request.sampling.temperature = 0.5f;
    request.sampling.top_k = 8;
    request.sampling.top_p = 0.9f;
    request.sampling.seed = seed++;
    requests.push_back(std::move(request));
  }
  SpeculativeConfig ngram;
  ngram.method = SpeculativeMethod::kNgram;
  ngram.num_speculative_tokens = 3;
  ngram.prompt_lookup_min = 1;
  ngram.prompt_lookup_max = 3;
  // With overlap scheduling too, whose verify steps launched before the step in flight is read back sample on the
  // device as well.
  for (bool overlap : {false, true}) {
    EngineStats first_stats, second_stats;
    const Tokens first = generate(*model, ngram, requests, first_stats, overlap);
    EXPECT_EQ(generate(*model, ngram, requests, second_stats, overlap), first) << "overlap " << overlap;
    EXPECT_GT(first_stats.num_spec_drafts, 0) << "overlap " << overlap;
    EXPECT_GT(first_stats.num_spec_accepted_tokens, 0) << "overlap " << overlap;
    EXPECT_LT(first_stats.num_spec_accepted_tokens, first_stats.num_spec_draft_tokens) << "overlap " << overlap;
  }
}

TEST(CudaEagle3Test, GreedyOutputsEqualThoseWithoutWithRandomAndOracleHeads) {
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  struct Case {
    std::filesystem::path target;
    std::filesystem::path head;
    bool oracle = false;
  };
  const auto oracle = testing::eagle3_oracle();
  const std::vector<Case> cases = {
      {fixtures_dir() / "models" / "llama", testing::eagle3_head("llama")},
      {fixtures_dir() / "models" / "qwen3", testing::eagle3_head("qwen3")},
      {oracle.target, oracle.head, true},
  };
  const auto golden = read_json(fixtures_dir() / "models" / "llama" / "golden.json");
  std::vector<GenerateRequest> requests;
  for (const auto& prompt : golden["prompts"]) requests.push_back(greedy(prompt.get<std::vector<int32_t>>(), 24));
  for (const Case& c : cases) {
    auto model = ShardedModel::load(c.target, "cuda");
    EngineStats stats;
    const Tokens expected = generate(*model, std::nullopt, requests, stats);
    for (int32_t k : {1, 3}) {
      SpeculativeConfig eagle3;
      eagle3.method = SpeculativeMethod::kEagle3;
      eagle3.num_speculative_tokens = k;
      eagle3.draft_model_dir = c.head;
      const std::string what = c.target.string() + " k=" + std::to_string(k);
      EXPECT_EQ(generate(*model, eagle3, requests, stats), expected) << what;
      EXPECT_GT(stats.num_spec_drafts, 0) << what;
      // The oracle's drafts are the target's tokens up to bf16 rounding.
      if (c.oracle) {
        EXPECT_GT(stats.num_spec_accepted_tokens * 10, stats.num_spec_draft_tokens * 9) << what;
      }
    }
  }
}

}  // namespace
}  // namespace tern
