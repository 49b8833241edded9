// The scheduler against a fake causal model (fake_model_runner.h): whatever the batching, chunking, prefix reuse
// or preemption, every request must produce exactly the tokens of a plain loop over its prompt, and every block
// must come back.
#include "engine/scheduler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <optional>
#include <random>

#include "engine/sampler.h"
#include "core/error.h"
#include "fake_model_runner.h"

namespace tern {
namespace {

using testing::fake_reference;
using testing::FakeModelRunner;

struct Collected {
  std::vector<int32_t> tokens;
  std::string text;
  std::optional<FinishReason> finish;
  bool request_finished = false;
  Usage usage;
};

using Results = std::map<std::pair<uint64_t, int32_t>, Collected>;

// The outputs of sequence `index` of request `id` (a function, so that test macros see no braced commas).
template <typename Map>
auto& entry(Map& results, uint64_t id, int32_t index) {
  return results[{id, index}];
}
template <typename Map>
auto entry(Map&& results, uint64_t id, int32_t index) {
  return results[{id, index}];
}

void collect(Results& results, const std::vector<RequestOutput>& outputs) {
  for (const auto& out : outputs) {
    auto& c = entry(results, out.request_id, out.index);
    EXPECT_FALSE(c.finish) << "output after the sequence finished";
    c.tokens.insert(c.tokens.end(), out.token_ids.begin(), out.token_ids.end());
    c.text += out.text;
    c.finish = out.finish_reason;
    c.request_finished = c.request_finished || out.request_finished;
    c.usage = out.usage;
  }
}

// Runs steps until every request has finished; returns the number of steps.
int run_to_completion(Scheduler& scheduler, FakeModelRunner& runner, Results& results, int max_steps = 100000) {
  int steps = 0;
  while (scheduler.has_unfinished_requests()) {
    const StepPlan plan = scheduler.schedule();
    collect(results, scheduler.update(plan, runner.execute(plan)));
    if (++steps > max_steps) {
      ADD_FAILURE() << "no progress after " << max_steps << " steps";
      break;
    }
  }
  return steps;
}

GenerateRequest greedy_request(std::vector<int32_t> prompt, int32_t max_tokens) {
  GenerateRequest r;
  r.prompt_token_ids = std::move(prompt);
  r.sampling.temperature = 0.0f;
  r.stop.max_tokens = max_tokens;
  return r;
}

std::vector<int32_t> random_prompt(std::mt19937& rng, int32_t len) {
  std::uniform_int_distribution<int32_t> token(0, testing::kFakeVocab - 1);
  std::vector<int32_t> p(len);
  for (auto& t : p) t = token(rng);
  return p;
}

SchedulerConfig config(int32_t budget, int32_t max_seqs) {
  SchedulerConfig c;
  c.max_num_batched_tokens = budget;
  c.max_num_seqs = max_seqs;
  c.max_model_len = 4096;
  return c;
}

struct Case {
  int32_t num_blocks;
  bool prefix_cache;
  int32_t budget;
};

class SchedulerLoad : public ::testing::TestWithParam<Case> {};

TEST_P(SchedulerLoad, EveryRequestMatchesTheReferenceAndNoBlockLeaks) {
  const Case c = GetParam();
  constexpr int32_t kBlock = 4;
  KvCacheManager kv(c.num_blocks, kBlock, c.prefix_cache);
  Scheduler scheduler(config(c.budget, 16), kv);
  FakeModelRunner runner(c.num_blocks, kBlock);
  std::mt19937 rng(7);
  const auto shared_prefix = random_prompt(rng, 13);
  std::map<uint64_t, std::vector<int32_t>> expected;
  for (uint64_t id = 1; id <= 40; ++id) {
    auto prompt = random_prompt(rng, 1 + static_cast<int32_t>(rng() % 30));
    if (id % 3 == 0) prompt.insert(prompt.begin(), shared_prefix.begin(), shared_prefix.end());
    const int32_t max_tokens = 1 + static_cast<int32_t>(rng() % 20);
    expected[id] = fake_reference(prompt, max_tokens);
    scheduler.add_request(id, greedy_request(prompt, max_tokens));
  }
  Results results;
  run_to_completion(scheduler, runner, results);
  for (const auto& [id, tokens] : expected) {
    const auto& got = entry(results, id, 0);
    EXPECT_EQ(got.tokens, tokens) << "request " << id;
    EXPECT_EQ(got.finish, FinishReason::kLength);
    EXPECT_TRUE(got.request_finished);
  }
  EXPECT_EQ(kv.num_available_blocks(), kv.num_blocks());
  if (!c.prefix_cache) {
    EXPECT_EQ(kv.num_free_blocks(), kv.num_blocks());
  }
  if (c.num_blocks < 64) {
    EXPECT_GT(scheduler.counters().num_preemptions, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Pools, SchedulerLoad,
                         ::testing::Values(Case{1024, true, 64}, Case{1024, false, 7}, Case{24, true, 32},
                                           Case{24, false, 32}, Case{20, true, 5}));

TEST(Scheduler, RespectsTheTokenBudgetAndSequenceLimit) {
  KvCacheManager kv(256, 4, false);
  Scheduler scheduler(config(10, 3), kv);
  FakeModelRunner runner(256, 4);
  for (uint64_t id = 1; id <= 5; ++id) scheduler.add_request(id, greedy_request(std::vector<int32_t>(25, int32_t(id)), 4));
  Results results;
  while (scheduler.has_unfinished_requests()) {
    const StepPlan plan = scheduler.schedule();
    EXPECT_LE(plan.num_tokens(), 10);
    EXPECT_LE(scheduler.num_running(), 3);
    EXPECT_FALSE(plan.chunks.empty());
    collect(results, scheduler.update(plan, runner.execute(plan)));
  }
  for (uint64_t id = 1; id <= 5; ++id) {
    EXPECT_EQ(entry(results, id, 0).tokens, fake_reference(std::vector<int32_t>(25, int32_t(id)), 4));
  }
}

TEST(Scheduler, ChunkedPrefillMixesWithDecodes) {
  KvCacheManager kv(256, 4, false);
  Scheduler scheduler(config(8, 8), kv);
  FakeModelRunner runner(256, 4);
  scheduler.add_request(1, greedy_request({1, 2, 3}, 50));
  Results results;
  auto plan = scheduler.schedule();
  collect(results, scheduler.update(plan, runner.execute(plan)));
  scheduler.add_request(2, greedy_request(std::vector<int32_t>(30, 5), 2));
  plan = scheduler.schedule();
  ASSERT_EQ(plan.chunks.size(), 2u);
  EXPECT_EQ(plan.chunks[0].token_ids.size(), 1u);  // the decode
  EXPECT_TRUE(plan.chunks[0].sample);
  EXPECT_EQ(plan.chunks[1].token_ids.size(), 7u);  // a prefill chunk filling the budget
  EXPECT_FALSE(plan.chunks[1].sample);
  collect(results, scheduler.update(plan, runner.execute(plan)));
  run_to_completion(scheduler, runner, results);
  EXPECT_EQ(entry(results, 2, 0).tokens, fake_reference(std::vector<int32_t>(30, 5), 2));
}

TEST(Scheduler, PrefixCacheSkipsCachedTokensAndReportsThem) {
  KvCacheManager kv(256, 4, true);
  Scheduler scheduler(config(512, 8), kv);
  FakeModelRunner runner(256, 4);
  std::mt19937 rng(3);
  const auto prefix = random_prompt(rng, 40);
  auto first = prefix;
  first.push_back(1);
  auto second = prefix;
  second.push_back(2);
  Results results;
  scheduler.add_request(1, greedy_request(first, 6));
  run_to_completion(scheduler, runner, results);
  const int64_t before = runner.num_tokens_computed();
  scheduler.add_request(2, greedy_request(second, 6));
  run_to_completion(scheduler, runner, results);
  EXPECT_EQ(entry(results, 2, 0).usage.cached_tokens, 40);
  EXPECT_EQ(entry(results, 2, 0).usage.prompt_tokens, 41);
  EXPECT_EQ(runner.num_tokens_computed() - before, 1 + 5);  // one prompt token, then five decodes
  EXPECT_EQ(entry(results, 2, 0).tokens, fake_reference(second, 6));

  // The next turn of the first conversation reuses its prompt and its answer.
  auto turn2 = first;
  turn2.insert(turn2.end(), entry(results, 1, 0).tokens.begin(), entry(results, 1, 0).tokens.end());
  turn2.insert(turn2.end(), {7, 8, 9});
  scheduler.add_request(3, greedy_request(turn2, 3));
  run_to_completion(scheduler, runner, results);
  // Turn one computed its 41 prompt tokens and 5 of its 6 answer tokens: 46, so 44 in whole blocks.
  EXPECT_EQ(entry(results, 3, 0).usage.cached_tokens, 44);
  EXPECT_EQ(entry(results, 3, 0).tokens, fake_reference(turn2, 3));
}

TEST(Scheduler, PreemptsTheNewestRequest) {
  KvCacheManager kv(6, 4, false);  // 24 tokens
  Scheduler scheduler(config(64, 8), kv);
  FakeModelRunner runner(6, 4);
  scheduler.add_request(1, greedy_request(std::vector<int32_t>(6, 1), 10));
  scheduler.add_request(2, greedy_request(std::vector<int32_t>(6, 2), 10));
  Results results;
  std::vector<uint64_t> finish_order;
  while (scheduler.has_unfinished_requests()) {
    const StepPlan plan = scheduler.schedule();
    for (const auto& out : scheduler.update(plan, runner.execute(plan))) {
      if (out.request_finished) finish_order.push_back(out.request_id);
      collect(results, {out});
    }
  }
  EXPECT_GT(scheduler.counters().num_preemptions, 0);
  EXPECT_EQ(finish_order, (std::vector<uint64_t>{1, 2}));  // the older request never yields
  EXPECT_EQ(entry(results, 2, 0).tokens, fake_reference(std::vector<int32_t>(6, 2), 10));
  EXPECT_EQ(kv.num_free_blocks(), 6);
}

TEST(Scheduler, PriorityPolicyAdmitsTheMostImportantFirst) {
  KvCacheManager kv(64, 4, false);
  auto c = config(64, 1);
  c.policy = SchedulingPolicy::kPriority;
  Scheduler scheduler(c, kv);
  FakeModelRunner runner(64, 4);
  for (int32_t priority : {5, 1, 3}) {
    auto r = greedy_request({priority}, 2);
    r.priority = priority;
    scheduler.add_request(static_cast<uint64_t>(priority), r);
  }
  std::vector<uint64_t> finish_order;
  while (scheduler.has_unfinished_requests()) {
    const StepPlan plan = scheduler.schedule();
    for (const auto& out : scheduler.update(plan, runner.execute(plan))) {
      if (out.request_finished) finish_order.push_back(out.request_id);
    }
  }
  EXPECT_EQ(finish_order, (std::vector<uint64_t>{1, 3, 5}));
}

// One API request's prompts x n (an admission group) take turns with requests that arrive after them: a later
// request waits for a running slot, not for the whole fan-out (FCFS by arrival would put it behind 32 sequences).
// The prompts are shorter than a block, so that the forks hold no shared blocks (which would admit them first).
TEST(Scheduler, AFanOutTakesTurnsWithLaterRequests) {
  KvCacheManager kv(256, 4, false);
  Scheduler scheduler(config(64, 2), kv);
  FakeModelRunner runner(256, 4);
  constexpr int32_t kFanOutTokens = 8;
  for (uint64_t id = 1; id <= 8; ++id) {
    auto r = greedy_request(std::vector<int32_t>(3, int32_t(id)), kFanOutTokens);
    r.sampling.n = 4;
    r.admission_group = 77;
    scheduler.add_request(id, r);
  }
  Results results;
  std::vector<uint64_t> finish_order;
  const auto step = [&] {
    const StepPlan plan = scheduler.schedule();
    for (const auto& out : scheduler.update(plan, runner.execute(plan))) {
      if (out.request_finished) finish_order.push_back(out.request_id);
      collect(results, {out});
    }
  };
  for (int i = 0; i < 3; ++i) step();
  scheduler.add_request(100, greedy_request({9, 9, 9}, 2));
  int steps_to_finish = 0;
  while (std::find(finish_order.begin(), finish_order.end(), 100u) == finish_order.end()) {
    ASSERT_LT(steps_to_finish, 1000);
    step();
    ++steps_to_finish;
  }
  // It is next once a running fan-out sequence ends (at most kFanOutTokens steps), then takes its 2 steps.
  EXPECT_LE(steps_to_finish, kFanOutTokens + 2 + 1);
  EXPECT_TRUE(finish_order.size() < 8) << "the fan-out finished first";
  run_to_completion(scheduler, runner, results);
  EXPECT_EQ(entry(results, 100, 0).tokens, fake_reference(std::vector<int32_t>{9, 9, 9}, 2));
  for (uint64_t id = 1; id <= 8; ++id) {
    for (int32_t index = 0; index < 4; ++index) {
      EXPECT_EQ(entry(results, id, index).tokens, fake_reference(std::vector<int32_t>(3, int32_t(id)), kFanOutTokens));
    }
  }
  EXPECT_EQ(kv.num_free_blocks(), 256);
}

// Requests of no group (each its own) keep FCFS among themselves, and a request's forks take turns with them (the
// forks share no blocks of a prompt shorter than a block; forks holding blocks are admitted first).
TEST(Scheduler, ForksTakeTurnsWithLaterSingleRequests) {
  KvCacheManager kv(256, 4, false);
  Scheduler scheduler(config(64, 1), kv);
  FakeModelRunner runner(256, 4);
  auto fan_out = greedy_request({1, 2, 3}, 3);
  fan_out.sampling.n = 3;
  scheduler.add_request(1, fan_out);
  scheduler.add_request(2, greedy_request({4}, 3));
  scheduler.add_request(3, greedy_request({5}, 3));
  std::vector<std::pair<uint64_t, int32_t>> finish_order;  // (request, sequence index)
  while (scheduler.has_unfinished_requests()) {
    const StepPlan plan = scheduler.schedule();
    for (const auto& out : scheduler.update(plan, runner.execute(plan))) {
      if (out.finish_reason) finish_order.emplace_back(out.request_id, out.index);
    }
  }
  // Turn 0: request 1's first sequence, then 2 and 3 by arrival; turns 1 and 2: request 1's forks.
  const std::vector<std::pair<uint64_t, int32_t>> expected = {{1, 0}, {2, 0}, {3, 0}, {1, 1}, {1, 2}};
  EXPECT_EQ(finish_order, expected);
}

TEST(Scheduler, CancelFreesBlocksAtOnceAndEndsTheStream) {
  KvCacheManager kv(64, 4, false);
  Scheduler scheduler(config(64, 8), kv);
  FakeModelRunner runner(64, 4);
  auto r = greedy_request(std::vector<int32_t>(20, 3), 100);
  r.sampling.n = 3;
  scheduler.add_request(1, r);
  scheduler.add_request(2, greedy_request({1}, 100));
  Results results;
  for (int i = 0; i < 3; ++i) {
    const StepPlan plan = scheduler.schedule();
    collect(results, scheduler.update(plan, runner.execute(plan)));
  }
  EXPECT_LT(kv.num_free_blocks(), 64);
  collect(results, scheduler.abort(1, "client went away"));
  collect(results, scheduler.abort(2));
  EXPECT_TRUE(scheduler.abort(2).empty());
  EXPECT_FALSE(scheduler.has_unfinished_requests());
  EXPECT_EQ(kv.num_free_blocks(), 64);
  for (int32_t index = 0; index < 3; ++index) EXPECT_EQ(entry(results, 1, index).finish, FinishReason::kAbort);
  EXPECT_TRUE(entry(results, 2, 0).request_finished);
  // The runner hears of the freed sequences with the next plan.
  const StepPlan plan = scheduler.schedule();
  EXPECT_EQ(plan.finished_sequence_ids.size(), 4u);
  runner.execute(plan);
}

TEST(Scheduler, ForksShareThePromptBlocks) {
  KvCacheManager kv(64, 4, true);
  Scheduler scheduler(config(512, 8), kv);
  FakeModelRunner runner(64, 4);
  auto r = greedy_request(std::vector<int32_t>(18, 4), 5);
  r.sampling.n = 4;
  scheduler.add_request(1, r);
  Results results;
  run_to_completion(scheduler, runner, results);
  // The first sequence computes the 18 prompt tokens; each fork only the last two (16 are shared), then 4
  // decodes each.
  EXPECT_EQ(runner.num_tokens_computed(), 18 + 3 * 2 + 4 * 4);
  const auto expected = fake_reference(std::vector<int32_t>(18, 4), 5);
  for (int32_t index = 0; index < 4; ++index) EXPECT_EQ(entry(results, 1, index).tokens, expected);
  EXPECT_EQ(entry(results, 1, 3).usage.completion_tokens, 20);
  EXPECT_EQ(kv.num_available_blocks(), 64);
}

// Spells each token as one letter, so that text positions map to tokens.
class LetterStream : public TextStream {
 public:
  std::string push(int32_t id) override { return std::string(1, static_cast<char>('a' + id % 26)); }
  std::string flush() override { return {}; }
};

TEST(Scheduler, StopStringsSpanningTokensEndTheSequenceWithoutLeaking) {
  KvCacheManager kv(64, 4, false);
  Scheduler scheduler(config(64, 8), kv, [](bool) { return std::make_unique<LetterStream>(); });
  FakeModelRunner runner(64, 4);
  const std::vector<int32_t> prompt{1, 2, 3};
  const auto tokens = fake_reference(prompt, 20);
  std::string letters;
  for (int32_t t : tokens) letters += static_cast<char>('a' + t % 26);
  const std::string stop = letters.substr(6, 3);  // spans three tokens
  auto r = greedy_request(prompt, 20);
  r.stop.stop_strings = {stop};
  scheduler.add_request(1, r);
  scheduler.add_request(2, greedy_request(prompt, 20));
  Results results;
  run_to_completion(scheduler, runner, results);
  const size_t at = letters.find(stop);
  EXPECT_EQ(entry(results, 1, 0).text, letters.substr(0, at));
  EXPECT_EQ(entry(results, 1, 0).tokens.size(), at + stop.size());
  EXPECT_EQ(entry(results, 1, 0).finish, FinishReason::kStop);
  EXPECT_EQ(entry(results, 2, 0).text, letters);
}

TEST(Scheduler, StopTokensAndEos) {
  KvCacheManager kv(64, 4, false);
  const std::vector<int32_t> prompt{9, 9};
  const auto tokens = fake_reference(prompt, 10);
  auto c = config(64, 8);
  c.eos_token_ids = {tokens[4]};
  Scheduler scheduler(c, kv);
  FakeModelRunner runner(64, 4);
  scheduler.add_request(1, greedy_request(prompt, 10));
  auto r = greedy_request(prompt, 10);
  r.stop.stop_token_ids = {tokens[2]};
  scheduler.add_request(2, r);
  r = greedy_request(prompt, 10);
  r.stop.ignore_eos = true;
  scheduler.add_request(3, r);
  Results results;
  run_to_completion(scheduler, runner, results);
  const auto first = [&](size_t n) { return std::vector<int32_t>(tokens.begin(), tokens.begin() + n); };
  const size_t eos_at = std::find(tokens.begin(), tokens.end(), tokens[4]) - tokens.begin();
  EXPECT_EQ(entry(results, 1, 0).tokens, first(eos_at + 1));
  EXPECT_EQ(entry(results, 1, 0).finish, FinishReason::kStop);
  const size_t stop_at = std::find(tokens.begin(), tokens.end(), tokens[2]) - tokens.begin();
  EXPECT_EQ(entry(results, 2, 0).tokens, first(std::min(stop_at, eos_at) + 1));
  EXPECT_EQ(entry(results, 3, 0).tokens, tokens);
  EXPECT_EQ(entry(results, 3, 0).finish, FinishReason::kLength);
}

TEST(Scheduler, RejectsRequestsThatCannotRun) {
  KvCacheManager kv(4, 4, false);
  Scheduler scheduler(config(64, 8), kv);
  EXPECT_THROW(scheduler.add_request(1, greedy_request({}, 1)), Error);
  EXPECT_THROW(scheduler.add_request(1, greedy_request(std::vector<int32_t>(16, 1), 1)), Error);  // pool of 16
  auto r = greedy_request({1}, 1);
  r.stop.stop_strings = {"x"};
  EXPECT_THROW(scheduler.add_request(1, r), Error);  // no detokenizer
  scheduler.add_request(1, greedy_request({1}, 1));
  EXPECT_THROW(scheduler.add_request(1, greedy_request({1}, 1)), Error);
}

TEST(Scheduler, ASequenceOutgrowingThePoolEndsWithLength) {
  KvCacheManager kv(3, 4, false);  // 12 tokens
  Scheduler scheduler(config(64, 8), kv);
  FakeModelRunner runner(3, 4);
  scheduler.add_request(1, greedy_request({1, 2, 3}, 100));
  Results results;
  run_to_completion(scheduler, runner, results);
  EXPECT_EQ(entry(results, 1, 0).finish, FinishReason::kLength);
  EXPECT_EQ(entry(results, 1, 0).tokens, fake_reference(std::vector<int32_t>{1, 2, 3}, 10));
  EXPECT_EQ(kv.num_free_blocks(), 3);
}

// Overlap scheduling: the engine schedules and runs step N+1 before it applies step N's tokens.

// Runs steps until every request has finished, pipelined as the overlap engine does or one step at a time.
// `abort_after`: requests aborted once that many tokens of theirs came out. Returns how many plans carried a
// token in flight.
int drive(Scheduler& scheduler, FakeModelRunner& runner, Results& results, bool pipelined,
          const std::map<uint64_t, size_t>& abort_after = {}) {
  const auto apply = [&](const StepPlan& plan, const StepResult& result) {
    collect(results, scheduler.update(plan, result));
    for (const auto& [id, count] : abort_after) {
      const auto& got = entry(results, id, 0);
      if (!got.finish && got.tokens.size() >= count) collect(results, scheduler.abort(id));
    }
  };
  int num_plans_with_tokens_in_flight = 0;
  std::optional<std::pair<StepPlan, StepResult>> in_flight;
  for (int steps = 0; scheduler.has_unfinished_requests() || in_flight; ++steps) {
    if (steps > 100000) {
      ADD_FAILURE() << "no progress after " << steps << " steps";
      break;
    }
    StepPlan plan = scheduler.schedule();
    num_plans_with_tokens_in_flight += std::any_of(plan.chunks.begin(), plan.chunks.end(), [](const auto& chunk) {
      return !chunk.token_ids.empty() && chunk.token_ids.back() == kTokenInFlight;
    });
    StepResult result = runner.execute(plan);
    if (!pipelined) {
      apply(plan, result);
      continue;
    }
    if (in_flight) apply(in_flight->first, in_flight->second);
    in_flight.reset();
    if (!plan.chunks.empty()) in_flight.emplace(std::move(plan), std::move(result));
  }
  return num_plans_with_tokens_in_flight;
}

class SchedulerOverlap : public ::testing::TestWithParam<Case> {};

// EOS-like stop tokens and stop strings end sequences at steps the scheduler cannot foresee, aborts come
// mid-stream, forks, prefix hits and (in the small pools) preemptions happen with tokens in flight: the
// pipelined loop must stream exactly what the synchronous one does, and return every block.
TEST_P(SchedulerOverlap, PipelinedStepsStreamWhatSynchronousStepsDo) {
  const Case c = GetParam();
  constexpr int32_t kBlock = 4;
  struct Outcome {
    Results results;
    SchedulerCounters counters;
  };
  std::map<bool, Outcome> outcomes;
  std::map<uint64_t, std::vector<int32_t>> plain;  // requests that end by length: the reference tokens
  for (bool pipelined : {false, true}) {
    KvCacheManager kv(c.num_blocks, kBlock, c.prefix_cache);
    Scheduler scheduler(config(c.budget, 16), kv, [](bool) { return std::make_unique<LetterStream>(); });
    FakeModelRunner runner(c.num_blocks, kBlock);
    std::mt19937 rng(11);
    const auto shared_prefix = random_prompt(rng, 13);
    std::map<uint64_t, size_t> abort_after;
    for (uint64_t id = 1; id <= 36; ++id) {
      auto prompt = random_prompt(rng, 1 + static_cast<int32_t>(rng() % 30));
      if (id % 3 == 0) prompt.insert(prompt.begin(), shared_prefix.begin(), shared_prefix.end());
      const int32_t max_tokens = 1 + static_cast<int32_t>(rng() % 20);
      const auto reference = fake_reference(prompt, max_tokens);
      auto request = greedy_request(prompt, max_tokens);
      const size_t at = rng() % reference.size();
      if (id % 4 == 1) {
        request.stop.stop_token_ids = {reference[at]};
      } else if (id % 4 == 2) {
        request.stop.stop_strings = {std::string(1, static_cast<char>('a' + reference[at] % 26))};
      } else if (id % 8 == 3) {
        abort_after[id] = 1 + at;
      } else {
        plain[id] = reference;
      }
      // Forks start when the first sequence's first token is applied, a step later when pipelined: how far they
      // got when their request is aborted depends on the timing, so aborted requests have one sequence.
      if (id % 5 == 0 && !abort_after.count(id)) request.sampling.n = 3;
      scheduler.add_request(id, request);
    }
    Outcome& outcome = outcomes[pipelined];
    const int num_in_flight_plans = drive(scheduler, runner, outcome.results, pipelined, abort_after);
    outcome.counters = scheduler.counters();
    EXPECT_EQ(kv.num_available_blocks(), kv.num_blocks()) << "pipelined " << pipelined;
    if (pipelined) {
      EXPECT_GT(num_in_flight_plans, 0);
      EXPECT_GT(runner.num_tokens_in_flight_read(), 0);
    } else {
      EXPECT_EQ(num_in_flight_plans, 0);
    }
    if (c.num_blocks < 64) {
      EXPECT_GT(scheduler.counters().num_preemptions, 0) << "pipelined " << pipelined;
    }
  }
  const Results& sync = outcomes[false].results;
  const Results& pipelined = outcomes[true].results;
  ASSERT_EQ(sync.size(), pipelined.size());
  // Per request: whether it finished and its final usage (an output's usage counts the tokens of all of the
  // request's sequences so far, and how its sequences interleave depends on the timing).
  const auto totals = [](const Results& results) {
    std::map<uint64_t, std::pair<bool, int32_t>> per_request;
    for (const auto& [key, c] : results) {
      auto& [finished, completion_tokens] = per_request[key.first];
      finished = finished || c.request_finished;
      completion_tokens = std::max(completion_tokens, c.usage.completion_tokens);
    }
    return per_request;
  };
  EXPECT_EQ(totals(pipelined), totals(sync));
  for (const auto& [key, want] : sync) {
    const auto& got = pipelined.at(key);
    const std::string which = "request " + std::to_string(key.first) + "." + std::to_string(key.second);
    EXPECT_EQ(got.tokens, want.tokens) << which;
    EXPECT_EQ(got.text, want.text) << which;
    EXPECT_EQ(got.finish, want.finish) << which;
    if (plain.count(key.first)) {
      EXPECT_EQ(got.tokens, plain.at(key.first)) << which;
    }
  }
  EXPECT_EQ(outcomes[true].counters.num_generated_tokens, outcomes[false].counters.num_generated_tokens);
  EXPECT_EQ(outcomes[true].counters.num_finished_requests, outcomes[false].counters.num_finished_requests);
}

INSTANTIATE_TEST_SUITE_P(Pools, SchedulerOverlap,
                         ::testing::Values(Case{1024, true, 64}, Case{1024, false, 7}, Case{24, true, 32},
                                           Case{20, false, 5}, Case{20, true, 5}));

// A stop token is known only when it arrives: the next token was already computed, and is dropped. max_tokens is
// known ahead: nothing is computed past it.
TEST(SchedulerOverlap, ComputesOneTokenPastAStopAndNonePastMaxTokens) {
  const std::vector<int32_t> prompt{5, 6, 7};
  const auto tokens = fake_reference(prompt, 10);
  const size_t stop_at = std::find(tokens.begin(), tokens.end(), tokens[2]) - tokens.begin();
  for (bool pipelined : {false, true}) {
    KvCacheManager kv(16, 4, false);
    Scheduler scheduler(config(64, 8), kv);
    FakeModelRunner runner(16, 4);
    auto stopped = greedy_request(prompt, 10);
    stopped.stop.stop_token_ids = {tokens[2]};
    scheduler.add_request(1, stopped);
    Results results;
    drive(scheduler, runner, results, pipelined);
    EXPECT_EQ(entry(results, 1, 0).tokens, std::vector<int32_t>(tokens.begin(), tokens.begin() + stop_at + 1));
    EXPECT_EQ(scheduler.counters().num_generated_tokens, static_cast<int64_t>(stop_at + 1));
    EXPECT_EQ(runner.num_tokens_computed(), static_cast<int64_t>(prompt.size() + stop_at + (pipelined ? 1 : 0)));
    EXPECT_EQ(kv.num_free_blocks(), 16);

    KvCacheManager kv2(16, 4, false);
    Scheduler bounded(config(64, 8), kv2);
    FakeModelRunner runner2(16, 4);
    bounded.add_request(1, greedy_request(prompt, 4));
    Results bounded_results;
    drive(bounded, runner2, bounded_results, pipelined);
    EXPECT_EQ(entry(bounded_results, 1, 0).tokens, fake_reference(prompt, 4));
    EXPECT_EQ(runner2.num_tokens_computed(), static_cast<int64_t>(prompt.size() + 3)) << "pipelined " << pipelined;
  }
}

// Prompt lookup with overlap scheduling: while a sequence's one-token step is in flight its next step may verify
// drafts after that token, which the chunk carries as kTokenInFlight; the in-flight token counts against
// max_tokens, nothing is scheduled for the sequence until the verify step is applied, and applying the two steps in
// order keeps the accepted draft and gives the rejected one's slot back.
TEST(SchedulerOverlap, DraftsGoAfterATokenInFlight) {
  KvCacheManager kv(16, 4, false);
  Scheduler scheduler(config(64, 8), kv);
  scheduler.add_request(1, greedy_request({5, 6, 7}, 5));
  const StepPlan prefill = scheduler.schedule();
  ASSERT_EQ(prefill.chunks.size(), 1u);
  const uint64_t seq = prefill.chunks[0].sequence_id;

  const auto requests = scheduler.draft_requests(4);
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_TRUE(requests[0].next_token_in_flight);
  const std::vector<int32_t> known(requests[0].token_ids.begin(), requests[0].token_ids.end());
  EXPECT_EQ(known, (std::vector<int32_t>{5, 6, 7}));
  EXPECT_EQ(requests[0].max_draft_tokens, 3);  // 5 tokens: the one in flight, the step's own, 3 drafts
  const StepPlan verify = scheduler.schedule({{seq, {40, 41}}});
  ASSERT_EQ(verify.chunks.size(), 1u);
  EXPECT_EQ(verify.chunks[0].token_ids, (std::vector<int32_t>{kTokenInFlight, 40, 41}));
  EXPECT_EQ(verify.chunks[0].num_draft_tokens, 2);
  EXPECT_EQ(verify.chunks[0].num_cached_tokens, 3);
  EXPECT_TRUE(scheduler.draft_requests(4).empty());
  EXPECT_TRUE(scheduler.schedule().chunks.empty());

  Results results;
  collect(results, scheduler.update(prefill, StepResult{{{seq, 30, std::nullopt}}}));
  collect(results, scheduler.update(verify, StepResult{{{seq, 40, std::nullopt}, {seq, 50, std::nullopt}}}));
  EXPECT_EQ(entry(results, 1, 0).tokens, (std::vector<int32_t>{30, 40, 50}));
  EXPECT_EQ(scheduler.counters().num_spec_draft_tokens, 2);
  EXPECT_EQ(scheduler.counters().num_spec_accepted_tokens, 1);
  // 30 and 40 have their KV; 50 is next. 41's slot went back with the block past them.
  const StepPlan decode = scheduler.schedule();
  ASSERT_EQ(decode.chunks.size(), 1u);
  EXPECT_EQ(decode.chunks[0].token_ids, (std::vector<int32_t>{50}));
  EXPECT_EQ(decode.chunks[0].num_cached_tokens, 5);
  EXPECT_EQ(kv.num_free_blocks(), 14);
  collect(results, scheduler.update(decode, StepResult{{{seq, 60, std::nullopt}}}));
  const StepPlan last = scheduler.schedule();
  collect(results, scheduler.update(last, StepResult{{{seq, 70, std::nullopt}}}));
  EXPECT_EQ(entry(results, 1, 0).tokens, (std::vector<int32_t>{30, 40, 50, 60, 70}));
  EXPECT_EQ(entry(results, 1, 0).finish, FinishReason::kLength);
  EXPECT_EQ(kv.num_free_blocks(), 16);
}

}  // namespace
}  // namespace tern
