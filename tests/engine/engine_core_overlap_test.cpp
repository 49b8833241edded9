// Overlap scheduling end to end on the fixture models (CPU backend): with EngineConfig::overlap_schedule the engine
// launches step N+1 before it applies step N, and every output, finish reason, usage and counter must equal those
// of the same requests run one step at a time (the reference), which the other engine tests check against
// transformers and single-sequence generation.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>

#include "engine/engine_core.h"
#include "engine/sharded_model.h"
#include "fixture_model.h"
#include "fixtures.h"
#include "greedy_request.h"
#include "tokenizer/tokenizer.h"

namespace tern {
namespace {

using testing::fixtures_dir;
using testing::greedy;
using testing::load_fixture_model;

struct Collected {
  std::vector<int32_t> tokens;
  std::string text;
  std::optional<FinishReason> finish;
  int32_t completion_tokens = 0;
};

using Results = std::map<std::pair<uint64_t, int32_t>, Collected>;

struct Workload {
  std::vector<std::pair<uint64_t, GenerateRequest>> requests;
  std::map<uint64_t, size_t> abort_after;  // requests aborted once that many of their tokens came out
};

struct Outcome {
  Results results;
  EngineStats stats;
  std::vector<size_t> outputs_per_step;
};

void record(Results& results, const std::vector<RequestOutput>& outputs) {
  for (const auto& out : outputs) {
    auto& c = results[{out.request_id, out.index}];
    EXPECT_FALSE(c.finish) << "output after request " << out.request_id << "." << out.index << " finished";
    c.tokens.insert(c.tokens.end(), out.token_ids.begin(), out.token_ids.end());
    c.text += out.text;
    if (out.finish_reason) c.finish = out.finish_reason;
    c.completion_tokens = out.usage.completion_tokens;
  }
}

Outcome run(EngineCore& core, const Workload& workload) {
  Outcome outcome;
  for (const auto& [id, request] : workload.requests) core.add_request(id, request);
  while (core.has_unfinished_requests()) {
    const auto outputs = core.step();
    outcome.outputs_per_step.push_back(outputs.size());
    record(outcome.results, outputs);
    for (const auto& [id, count] : workload.abort_after) {
      const auto it = outcome.results.find({id, 0});
      if (it != outcome.results.end() && !it->second.finish && it->second.tokens.size() >= count) {
        record(outcome.results, core.abort(id));
      }
    }
    if (outcome.outputs_per_step.size() > 100000) {
      ADD_FAILURE() << "no progress";
      break;
    }
  }
  outcome.stats = core.stats();
  return outcome;
}

// Each request's completion tokens in its last output (an output's usage counts all of the request's sequences so
// far, and how sequences of n > 1 interleave depends on the timing).
std::map<uint64_t, int32_t> completion_tokens(const Results& results) {
  std::map<uint64_t, int32_t> per_request;
  for (const auto& [key, c] : results) per_request[key.first] = std::max(per_request[key.first], c.completion_tokens);
  return per_request;
}

void expect_same(const Outcome& overlapped, const Outcome& reference, const std::string& what) {
  ASSERT_EQ(overlapped.results.size(), reference.results.size()) << what;
  for (const auto& [key, want] : reference.results) {
    const auto& got = overlapped.results.at(key);
    const std::string which = what + ", request " + std::to_string(key.first) + "." + std::to_string(key.second);
    EXPECT_EQ(got.tokens, want.tokens) << which;
    EXPECT_EQ(got.text, want.text) << which;
    EXPECT_EQ(got.finish, want.finish) << which;
  }
  EXPECT_EQ(completion_tokens(overlapped.results), completion_tokens(reference.results)) << what;
  EXPECT_EQ(overlapped.stats.num_generated_tokens, reference.stats.num_generated_tokens) << what;
  EXPECT_EQ(overlapped.stats.num_finished_requests, reference.stats.num_finished_requests) << what;
  EXPECT_EQ(overlapped.stats.num_running + overlapped.stats.num_waiting, 0) << what;
  EXPECT_EQ(overlapped.stats.num_free_kv_blocks, overlapped.stats.num_kv_blocks) << what;
}

EngineConfig config(int32_t num_blocks, int32_t max_batched_tokens, bool overlap) {
  EngineConfig c;
  c.num_kv_blocks = num_blocks;
  c.max_num_batched_tokens = max_batched_tokens;
  c.overlap_schedule = overlap;
  c.log_kv_cache = false;
  return c;
}

GenerateRequest seeded(std::vector<int32_t> prompt, uint64_t seed, int32_t n, int32_t max_tokens) {
  GenerateRequest r = greedy(std::move(prompt), max_tokens);
  r.sampling.temperature = 0.8f;
  r.sampling.top_p = 0.9f;
  r.sampling.seed = seed;
  r.sampling.n = n;
  return r;
}

std::vector<int32_t> random_prompt(std::mt19937& rng, int64_t vocab, int32_t len) {
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(vocab - 1));
  std::vector<int32_t> prompt(static_cast<size_t>(len));
  for (auto& t : prompt) t = token(rng);
  return prompt;
}

// Stop strings and stop tokens end sequences at steps the scheduler cannot foresee, EOS may, max_tokens does at
// known steps; a repeated prompt hits the prefix cache; seeded and n > 1 requests sample on the host (the CPU
// backend samples only greedy rows itself), which drains the pipeline; two requests are aborted mid-stream. The
// small pool with a small step budget adds preemption and prompts chunked next to decodes.
TEST(EngineOverlap, StreamsWhatOneStepAtATimeStreams) {
  auto m = load_fixture_model("tern-py-13m");
  const auto dir = fixtures_dir() / "models" / "tern-py-13m";
  const auto tokenizer = Tokenizer::load(dir);
  const auto golden = testing::read_json(dir / "golden.json");
  const auto prompt = golden["prompts"][0].get<std::vector<int32_t>>();
  const auto expected = golden["greedy_32"][0].get<std::vector<int32_t>>();
  const std::string expected_text = tokenizer.decode(expected, true);

  Workload workload;
  workload.requests.emplace_back(1, greedy(prompt, 32));
  auto stop_string = greedy(prompt, 32);
  stop_string.stop.stop_strings = {expected_text.substr(expected_text.size() / 2, 4)};
  workload.requests.emplace_back(2, stop_string);
  auto stop_token = greedy(prompt, 32);
  stop_token.stop.stop_token_ids = {expected[5]};
  workload.requests.emplace_back(3, stop_token);
  workload.requests.emplace_back(4, greedy(prompt, 9));
  workload.requests.emplace_back(5, seeded(golden["prompts"][1].get<std::vector<int32_t>>(), 5, 1, 20));
  workload.requests.emplace_back(6, seeded(golden["prompts"][2].get<std::vector<int32_t>>(), 9, 3, 12));
  std::mt19937 rng(3);
  for (uint64_t id = 7; id <= 18; ++id) {
    auto request = greedy(random_prompt(rng, m.model->config().vocab_size, 1 + static_cast<int32_t>(id * 7 % 45)),
                          4 + static_cast<int32_t>(id % 13));
    request.stop.ignore_eos = id % 2 == 0;
    workload.requests.emplace_back(id, request);
  }
  workload.requests.emplace_back(19, greedy(golden["prompts"][3].get<std::vector<int32_t>>(), 200));
  workload.abort_after[19] = 7;
  workload.requests.emplace_back(20, greedy(golden["prompts"][4].get<std::vector<int32_t>>(), 200));
  workload.abort_after[20] = 1;

  struct Pool {
    int32_t num_blocks;
    int32_t max_batched_tokens;
  };
  for (const Pool pool : {Pool{256, 256}, Pool{10, 24}}) {
    const std::string what = std::to_string(pool.num_blocks) + " blocks, " + std::to_string(pool.max_batched_tokens) +
                             " tokens per step";
    EngineCore sync(*m.model, *m.backend, config(pool.num_blocks, pool.max_batched_tokens, false),
                    tokenizer_text_streams(tokenizer));
    const Outcome reference = run(sync, workload);
    EngineCore overlapped(*m.model, *m.backend, config(pool.num_blocks, pool.max_batched_tokens, true),
                          tokenizer_text_streams(tokenizer));
    const Outcome got = run(overlapped, workload);
    expect_same(got, reference, what);
    EXPECT_EQ(reference.results.at({1, 0}).tokens, expected) << what;
    EXPECT_EQ(reference.results.at({2, 0}).finish, FinishReason::kStop) << what;
    EXPECT_EQ(reference.results.at({3, 0}).finish, FinishReason::kStop) << what;
    EXPECT_EQ(reference.results.at({19, 0}).tokens.size(), 7u) << what;
    if (pool.num_blocks < 64) {
      EXPECT_GT(reference.stats.num_preemptions, 0) << what;
      EXPECT_GT(got.stats.num_preemptions, 0) << what;
    }
  }
}

// The pipeline runs ahead: the first step's token comes out of the second call to step(), which has launched the
// second step before applying the first; a last call applies the final token without launching anything.
TEST(EngineOverlap, EachStepsTokensComeOutOfTheNextCall) {
  auto m = load_fixture_model("llama");
  Workload workload;
  workload.requests.emplace_back(1, greedy({1, 2, 3, 4, 5}, 4));
  EngineCore sync(*m.model, *m.backend, config(64, 256, false));
  const Outcome reference = run(sync, workload);
  EngineCore overlapped(*m.model, *m.backend, config(64, 256, true));
  const Outcome got = run(overlapped, workload);
  EXPECT_EQ(reference.outputs_per_step, (std::vector<size_t>{1, 1, 1, 1}));
  EXPECT_EQ(got.outputs_per_step, (std::vector<size_t>{0, 1, 1, 1, 1}));
  expect_same(got, reference, "one request");
  // The same forward work: max_tokens is known ahead, so no token is computed past it.
  EXPECT_EQ(got.stats.num_computed_tokens, reference.stats.num_computed_tokens);
}

// Prompt lookup drafts after a token in flight: the prompt's prefill runs ahead, and the first verify step (its
// drafts the lookup's continuation after the guess for the prefill's token) is launched before the prefill's token
// is applied, so that the second call to step() gives out both steps' tokens (a one-token step would run ahead and
// give out only the prefill's). Every verify step is applied at once, and the tokens are those of one step at a
// time without drafts.
TEST(EngineOverlap, PromptLookupVerifiesAfterATokenInFlight) {
  auto m = load_fixture_model("llama");
  Workload workload;
  const std::vector<int32_t> prompt{1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3};
  workload.requests.emplace_back(1, greedy(prompt, 12));
  EngineCore sync(*m.model, *m.backend, config(64, 256, false));
  const Outcome reference = run(sync, workload);
  // The prefill's token is not in the prompt, so that a lookup after it would find nothing: the second step drafts
  // only if it drafted before that token was known.
  const int32_t first = reference.results.at({1, 0}).tokens.at(0);
  ASSERT_EQ(std::count(prompt.begin(), prompt.end(), first), 0);
  EngineConfig speculative = config(64, 256, true);
  speculative.speculative = SpeculativeConfig{};
  speculative.speculative->method = SpeculativeMethod::kNgram;
  speculative.speculative->num_speculative_tokens = 3;
  speculative.speculative->prompt_lookup_min = 1;
  speculative.speculative->prompt_lookup_max = 3;
  EngineCore overlapped(*m.model, *m.backend, speculative);
  const Outcome got = run(overlapped, workload);
  expect_same(got, reference, "prompt lookup");
  ASSERT_GE(got.outputs_per_step.size(), 2u);
  EXPECT_EQ(got.outputs_per_step[0], 0u);
  EXPECT_GE(got.outputs_per_step[1], 2u);
  EXPECT_GT(got.stats.num_spec_drafts, 0);
}

// Tensor-parallel CPU ranks: every rank fills in the tokens in flight from its own copy of the sampled ids.
TEST(EngineOverlap, TensorParallelRanksStreamWhatOneStepAtATimeStreams) {
  const auto dir = fixtures_dir() / "models" / "llama";
  auto model = ShardedModel::load(dir, "cpu", {.tensor_parallel_size = 2}, 2);
  std::mt19937 rng(9);
  Workload workload;
  for (uint64_t id = 1; id <= 8; ++id) {
    auto request = greedy(random_prompt(rng, model->config().vocab_size, 1 + static_cast<int32_t>(id * 5 % 30)),
                          3 + static_cast<int32_t>(id % 9));
    request.stop.ignore_eos = false;
    workload.requests.emplace_back(id, request);
  }
  workload.requests.emplace_back(9, seeded({4, 5, 6}, 17, 2, 6));
  EngineCore sync(*model, config(12, 32, false));
  const Outcome reference = run(sync, workload);
  EngineCore overlapped(*model, config(12, 32, true));
  expect_same(run(overlapped, workload), reference, "2 ranks");
}

}  // namespace
}  // namespace tern
