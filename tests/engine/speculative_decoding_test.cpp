// Speculative decoding end to end on the fixture models (CPU backend): with each proposer and k = 1..5, greedy
// outputs, finish reasons and logprobs equal those of the same engine without speculation, at batch sizes 1 and
// 9, with prefix caching, chunked prefill, preemption, stop tokens, parallel samples and a grammar.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <string>

#include "core/error.h"
#include "engine/engine_core.h"
#include "fixture_model.h"
#include "fixtures.h"
#include "grammar/compiled_grammar.h"
#include "greedy_request.h"
#include "tokenizer/tokenizer.h"

namespace tern {
namespace {

using testing::fixtures_dir;
using testing::greedy;
using testing::load_fixture_model;

struct Outcome {
  std::vector<int32_t> tokens;
  std::vector<TokenLogprob> logprobs;
  std::optional<FinishReason> finish;
  int32_t completion_tokens = 0;  // index 0: the request's, over its n sequences
};
using Outcomes = std::map<std::pair<uint64_t, int32_t>, Outcome>;

EngineConfig small_config(int32_t num_blocks, int32_t max_num_batched_tokens = 256) {
  EngineConfig c;
  c.num_kv_blocks = num_blocks;
  c.max_num_batched_tokens = max_num_batched_tokens;
  c.log_kv_cache = false;
  return c;
}

SpeculativeConfig ngram(int32_t k) {
  SpeculativeConfig s;
  s.method = SpeculativeMethod::kNgram;
  s.num_speculative_tokens = k;
  s.prompt_lookup_min = 1;
  s.prompt_lookup_max = 3;
  return s;
}

SpeculativeConfig draft_model(const std::string& fixture, int32_t k) {
  SpeculativeConfig s;
  s.method = SpeculativeMethod::kDraftModel;
  s.num_speculative_tokens = k;
  s.draft_model_dir = fixtures_dir() / "models" / fixture;
  return s;
}

Outcomes run(Model& model, Backend& backend, EngineConfig config, const std::vector<GenerateRequest>& requests,
             EngineStats* stats = nullptr, const TextStreamFactory& text_streams = {}) {
  EngineCore core(model, backend, std::move(config), text_streams);
  for (size_t i = 0; i < requests.size(); ++i) core.add_request(i + 1, requests[i]);
  Outcomes outcomes;
  while (core.has_unfinished_requests()) {
    for (auto& out : core.step()) {
      Outcome& o = outcomes[{out.request_id, out.index}];
      o.tokens.insert(o.tokens.end(), out.token_ids.begin(), out.token_ids.end());
      o.logprobs.insert(o.logprobs.end(), out.logprobs.begin(), out.logprobs.end());
      if (out.finish_reason) o.finish = out.finish_reason;
      // The request's total, as the last output reports it (the running totals depend on the sequences' pace).
      if (out.request_finished) outcomes[{out.request_id, 0}].completion_tokens = out.usage.completion_tokens;
    }
  }
  // Every block is back: none is held by a rejected draft.
  EXPECT_EQ(core.kv_cache_manager().num_available_blocks(), core.kv_cache_manager().num_blocks());
  if (stats) *stats = core.stats();
  return outcomes;
}

void expect_same(const Outcomes& expected, const Outcomes& actual, const std::string& what) {
  ASSERT_EQ(expected.size(), actual.size()) << what;
  for (const auto& [key, e] : expected) {
    const Outcome& a = actual.at(key);
    const std::string where = what + ", request " + std::to_string(key.first) + "." + std::to_string(key.second);
    EXPECT_EQ(a.tokens, e.tokens) << where;
    EXPECT_EQ(a.finish, e.finish) << where;
    EXPECT_EQ(a.completion_tokens, e.completion_tokens) << where;
    ASSERT_EQ(a.logprobs.size(), e.logprobs.size()) << where;
    for (size_t t = 0; t < e.logprobs.size(); ++t) {
      EXPECT_EQ(a.logprobs[t].token_id, e.logprobs[t].token_id) << where;
      EXPECT_NEAR(a.logprobs[t].logprob, e.logprobs[t].logprob, 1e-4) << where;
      ASSERT_EQ(a.logprobs[t].top.size(), e.logprobs[t].top.size()) << where;
      for (size_t j = 0; j < e.logprobs[t].top.size(); ++j) {
        EXPECT_EQ(a.logprobs[t].top[j].first, e.logprobs[t].top[j].first) << where;
      }
    }
  }
}

// Prompts that repeat a stretch of themselves (prompt lookup finds matches), of varied lengths; some share a
// 20-token prefix with the first (prefix cache hits).
std::vector<std::vector<int32_t>> repetitive_prompts(int count, int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(vocab - 1));
  std::vector<int32_t> shared(20);
  for (auto& t : shared) t = token(rng);
  std::vector<std::vector<int32_t>> prompts(count);
  for (int i = 0; i < count; ++i) {
    std::vector<int32_t>& p = prompts[i];
    if (i % 3 == 1) p = shared;
    std::vector<int32_t> stretch(static_cast<size_t>(4 + i % 7));
    for (auto& t : stretch) t = token(rng);
    for (int r = 0; r < 2 + i % 2; ++r) {
      p.insert(p.end(), stretch.begin(), stretch.end());
      p.push_back(token(rng));
    }
  }
  return prompts;
}

std::vector<GenerateRequest> greedy_requests(const std::vector<std::vector<int32_t>>& prompts) {
  std::vector<GenerateRequest> requests;
  for (size_t i = 0; i < prompts.size(); ++i) requests.push_back(greedy(prompts[i], 6 + static_cast<int32_t>(i * 5 % 23)));
  return requests;
}

// The model and the draft model proposers are checked on: a fixture and itself as its draft (which then agrees
// with every draft: the bookkeeping of full acceptance), and tern-py-13m with its real draft.
struct Case {
  std::string target;
  std::string draft;
};

class SpeculativeDecoding : public ::testing::TestWithParam<Case> {};

TEST_P(SpeculativeDecoding, GreedyOutputsEqualThoseWithoutForEachProposerKAndBatchSize) {
  const Case& c = GetParam();
  auto m = load_fixture_model(c.target);
  const auto prompts = repetitive_prompts(9, m.model->config().vocab_size, 3);
  const auto all = greedy_requests(prompts);
  const std::vector<GenerateRequest> one(all.begin() + 4, all.begin() + 5);
  for (const auto* requests : {&one, &all}) {
    const Outcomes expected = run(*m.model, *m.backend, small_config(256), *requests);
    for (int32_t k = 1; k <= 5; ++k) {
      for (const SpeculativeConfig& speculative : {ngram(k), draft_model(c.draft, k)}) {
        const std::string what = std::string(speculative_method_name(speculative.method)) + " k=" +
                                 std::to_string(k) + ", batch " + std::to_string(requests->size());
        EngineConfig config = small_config(256);
        config.speculative = speculative;
        EngineStats stats;
        expect_same(expected, run(*m.model, *m.backend, config, *requests, &stats), what);
        EXPECT_GT(stats.num_spec_drafts, 0) << what;
        EXPECT_EQ(stats.num_spec_accepted_tokens_per_pos.size(), static_cast<size_t>(k)) << what;
        if (speculative.method == SpeculativeMethod::kDraftModel && c.draft == c.target) {
          EXPECT_EQ(stats.num_spec_accepted_tokens, stats.num_spec_draft_tokens) << what;
        }
      }
    }
  }
}

TEST_P(SpeculativeDecoding, PrefixCachingChunkedPrefillAndPreemptionGiveTheSameTokens) {
  const Case& c = GetParam();
  auto m = load_fixture_model(c.target);
  const auto prompts = repetitive_prompts(12, m.model->config().vocab_size, 8);
  std::vector<GenerateRequest> requests;
  for (const auto& prompt : prompts) requests.push_back(greedy(prompt, 24));
  // 10 blocks of 16 tokens for ~800 tokens of load, 24 tokens a step: prompts go in chunks, sequences preempt.
  for (bool prefix_cache : {true, false}) {
    EngineConfig base = small_config(10, 24);
    base.enable_prefix_cache = prefix_cache;
    const Outcomes expected = run(*m.model, *m.backend, base, requests);
    for (const SpeculativeConfig& speculative : {ngram(3), draft_model(c.draft, 4)}) {
      const std::string what = std::string(speculative_method_name(speculative.method)) +
                               (prefix_cache ? " with" : " without") + " prefix cache";
      EngineConfig config = base;
      config.speculative = speculative;
      EngineStats stats;
      expect_same(expected, run(*m.model, *m.backend, config, requests, &stats), what);
      EXPECT_GT(stats.num_preemptions, 0) << what;
      EXPECT_GT(stats.num_spec_drafts, 0) << what;
      if (prefix_cache) {
        EXPECT_GT(stats.prefix_hit_tokens, 0) << what;
      }
    }
  }
}

TEST_P(SpeculativeDecoding, StopTokensMaxTokensLogprobsAndParallelSamplesAsWithout) {
  const Case& c = GetParam();
  auto m = load_fixture_model(c.target);
  const auto prompts = repetitive_prompts(6, m.model->config().vocab_size, 21);
  // Each request stops at a token its unconstrained run writes midway (so inside an accepted run of drafts).
  std::vector<GenerateRequest> requests = greedy_requests(prompts);
  const Outcomes free_run = run(*m.model, *m.backend, small_config(256), requests);
  for (size_t i = 0; i < requests.size(); ++i) {
    const auto& tokens = free_run.at({i + 1, 0}).tokens;
    requests[i].stop.stop_token_ids = {tokens[tokens.size() / 2]};
    requests[i].sampling.logprobs = 3;
    requests[i].sampling.n = i % 2 == 0 ? 2 : 1;
    requests[i].stop.ignore_eos = i % 3 == 0;
  }
  const Outcomes expected = run(*m.model, *m.backend, small_config(256), requests);
  for (const SpeculativeConfig& speculative : {ngram(4), draft_model(c.draft, 5)}) {
    EngineConfig config = small_config(256);
    config.speculative = speculative;
    expect_same(expected, run(*m.model, *m.backend, config, requests),
                std::string(speculative_method_name(speculative.method)));
  }
}

TEST_P(SpeculativeDecoding, SeededSampledRequestsAreReproducible) {
  const Case& c = GetParam();
  auto m = load_fixture_model(c.target);
  const auto prompts = repetitive_prompts(4, m.model->config().vocab_size, 5);
  std::vector<GenerateRequest> requests = greedy_requests(prompts);
  for (size_t i = 0; i < requests.size(); ++i) {
    requests[i].sampling.temperature = 0.8f;
    requests[i].sampling.top_p = 0.9f;
    requests[i].sampling.seed = 100 + i;
    requests[i].sampling.presence_penalty = i % 2 ? 0.3f : 0.0f;
  }
  for (const SpeculativeConfig& speculative : {ngram(3), draft_model(c.draft, 3)}) {
    EngineConfig config = small_config(256);
    config.speculative = speculative;
    const Outcomes first = run(*m.model, *m.backend, config, requests);
    expect_same(first, run(*m.model, *m.backend, config, requests), "seeded");
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, SpeculativeDecoding,
                         ::testing::Values(Case{"llama", "llama"}, Case{"qwen3", "qwen3"},
                                           Case{"tern-py-13m", "tern-py-draft-10m"},
                                           Case{"tern-py-13m", "tern-py-13m"}),
                         [](const auto& info) {
                           std::string name = info.param.target + "_draft_" + info.param.draft;
                           for (char& ch : name) {
                             if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           }
                           return name;
                         });

TEST(SpeculativeDecoding, ADraftModelWithAnotherVocabularyIsRefusedAtStart) {
  auto m = load_fixture_model("tern-py-13m");
  EngineConfig config = small_config(64);
  config.speculative = draft_model("llama", 3);
  try {
    EngineCore core(*m.model, *m.backend, config);
    ADD_FAILURE() << "a draft model with a vocabulary of 512 for a target of 32000 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("vocabulary of 512 tokens"), std::string::npos) << e.what();
  }
  config.speculative = draft_model("no-such-model", 3);
  EXPECT_THROW(EngineCore core(*m.model, *m.backend, config), Error);
}

// Drafts are checked against the grammar as one-token steps would be: the matcher advances with each kept draft
// only, so a constrained greedy output is the same with speculation.
TEST(SpeculativeDecoding, GrammarConstrainedOutputsEqualThoseWithout) {
  const auto dir = fixtures_dir() / "models" / "qwen3-chat-tiny";
  auto backend = make_cpu_backend(2);
  auto model = load_model(dir, *backend);
  const Tokenizer tokenizer = Tokenizer::load(dir);
  std::vector<std::string> bytes(static_cast<size_t>(tokenizer.vocab_size()));
  for (int32_t id = 0; id < tokenizer.vocab_size(); ++id) {
    if (!tokenizer.is_special(id)) bytes[static_cast<size_t>(id)] = tokenizer.token_bytes(id);
  }
  const auto vocabulary =
      std::make_shared<const grammar::TokenVocabulary>(std::move(bytes), model->config().eos_token_ids);
  std::vector<GenerateRequest> requests;
  for (const char* pattern : {"(ab|abc|b)+x{0,3}", "[a-c]{10,30}", "(yes|no)( (yes|no)){1,8}"}) {
    GenerateRequest request;
    request.prompt_token_ids = tokenizer.encode("ab abc ab abc ab", false);
    request.sampling.temperature = 0.0f;
    request.sampling.constraint = grammar::CompiledGrammar::compile(grammar::GrammarKind::kRegex, pattern, vocabulary);
    request.stop.max_tokens = 40;
    requests.push_back(std::move(request));
  }
  const Outcomes expected = run(*model, *backend, small_config(256), requests);
  for (const SpeculativeConfig& speculative :
       {ngram(4), draft_model("qwen3-chat-tiny", 3)}) {
    EngineConfig config = small_config(256);
    config.speculative = speculative;
    EngineStats stats;
    expect_same(expected, run(*model, *backend, config, requests, &stats),
                std::string(speculative_method_name(speculative.method)));
    EXPECT_GT(stats.num_spec_drafts, 0);
  }
}

}  // namespace
}  // namespace tern
