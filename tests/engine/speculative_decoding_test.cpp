// Speculative decoding end to end on the fixture models (CPU backend): with each proposer and k = 1..5, greedy
// outputs, finish reasons and logprobs equal those of the same engine without speculation, at batch sizes 1 and
// 9, with prefix caching, chunked prefill, preemption, stop tokens, parallel samples and a grammar. DeepSeek MTP on
// copies of the DeepSeek-V3 fixture with a next-n layer (mtp_checkpoint.h): a random one, whose drafts are mostly
// rejected, and an oracle, whose drafts are all accepted; and sampled tokens after its drafts follow the target's
// distribution. DeepSeek-V4's MTP block on copies of the V4 fixture with a random one and an oracle
// (v4_mtp_checkpoint.h). EAGLE-3 on the llama, llama3_rope and qwen3 fixtures with a random head, and on a bigram
// copy of llama with an oracle head (eagle3_checkpoint.h). In every run the requests' usage adds up to the engine's
// speculative counters.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <tuple>

#include "core/error.h"
#include "eagle3_checkpoint.h"
#include "engine/engine_core.h"
#include "fixture_model.h"
#include "fixtures.h"
#include "grammar/compiled_grammar.h"
#include "greedy_request.h"
#include "model/checkpoint.h"
#include "mtp_checkpoint.h"
#include "v4_mtp_checkpoint.h"
#include "tokenizer/tokenizer.h"

namespace tern {
namespace {

using testing::deepseek_v3_with_mtp;
using testing::eagle3_head;
using testing::deepseek_v4_with_mtp;
using testing::fixtures_dir;
using testing::greedy;
using testing::load_fixture_model;
using testing::MtpLayerKind;

struct Outcome {
  std::vector<int32_t> tokens;
  std::vector<TokenLogprob> logprobs;
  std::optional<FinishReason> finish;
  int32_t completion_tokens = 0;  // index 0: the request's, over its n sequences
  Usage usage;                     // index 0: the request's, as its last output reports it
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

SpeculativeConfig deepseek_mtp(const std::filesystem::path& checkpoint, int32_t k) {
  SpeculativeConfig s;
  s.method = SpeculativeMethod::kDeepseekMtp;
  s.num_speculative_tokens = k;
  s.draft_model_dir = checkpoint;  // the target's own checkpoint (the commands fill it in)
  return s;
}

SpeculativeConfig eagle3(const std::filesystem::path& head, int32_t k) {
  SpeculativeConfig s;
  s.method = SpeculativeMethod::kEagle3;
  s.num_speculative_tokens = k;
  s.draft_model_dir = head;
  return s;
}

// Runs `requests` to their ends on `core`, checking that every KV block comes back and that the requests' usage
// adds up to the engine's speculative counters.
Outcomes run(EngineCore& core, const std::vector<GenerateRequest>& requests, EngineStats* stats) {
  for (size_t i = 0; i < requests.size(); ++i) core.add_request(i + 1, requests[i]);
  Outcomes outcomes;
  while (core.has_unfinished_requests()) {
    for (auto& out : core.step()) {
      Outcome& o = outcomes[{out.request_id, out.index}];
      o.tokens.insert(o.tokens.end(), out.token_ids.begin(), out.token_ids.end());
      o.logprobs.insert(o.logprobs.end(), out.logprobs.begin(), out.logprobs.end());
      if (out.finish_reason) o.finish = out.finish_reason;
      // The request's total, as the last output reports it (the running totals depend on the sequences' pace).
      if (out.request_finished) {
        outcomes[{out.request_id, 0}].completion_tokens = out.usage.completion_tokens;
        outcomes[{out.request_id, 0}].usage = out.usage;
      }
    }
  }
  // Every block is back: none is held by a rejected draft.
  EXPECT_EQ(core.kv_cache_manager().num_available_blocks(), core.kv_cache_manager().num_blocks());
  // The requests' usage adds up to the engine's speculative counters.
  const EngineStats totals = core.stats();
  int64_t drafts = 0, draft_tokens = 0, accepted = 0;
  for (const auto& [key, outcome] : outcomes) {
    if (key.second != 0) continue;
    drafts += outcome.usage.spec_drafts;
    draft_tokens += outcome.usage.spec_draft_tokens;
    accepted += outcome.usage.spec_accepted_tokens;
  }
  EXPECT_EQ(drafts, totals.num_spec_drafts);
  EXPECT_EQ(draft_tokens, totals.num_spec_draft_tokens);
  EXPECT_EQ(accepted, totals.num_spec_accepted_tokens);
  if (stats) *stats = totals;
  return outcomes;
}

Outcomes run(Model& model, Backend& backend, EngineConfig config, const std::vector<GenerateRequest>& requests,
             EngineStats* stats = nullptr, const TextStreamFactory& text_streams = {}) {
  EngineCore core(model, backend, std::move(config), text_streams);
  return run(core, requests, stats);
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
        // One step at a time, then with overlap scheduling: a draft model drafts at the same steps (the step in
        // flight is applied before each proposal), prompt lookup also after a token in flight.
        EngineStats one_at_a_time;
        for (bool overlap : {false, true}) {
          const std::string what = std::string(speculative_method_name(speculative.method)) + " k=" +
                                   std::to_string(k) + ", batch " + std::to_string(requests->size()) +
                                   (overlap ? ", overlap" : "");
          EngineConfig config = small_config(256);
          config.speculative = speculative;
          config.overlap_schedule = overlap;
          EngineStats stats;
          expect_same(expected, run(*m.model, *m.backend, config, *requests, &stats), what);
          EXPECT_GT(stats.num_spec_drafts, 0) << what;
          EXPECT_EQ(stats.num_spec_accepted_tokens_per_pos.size(), static_cast<size_t>(k)) << what;
          if (speculative.method == SpeculativeMethod::kDraftModel && c.draft == c.target) {
            EXPECT_EQ(stats.num_spec_accepted_tokens, stats.num_spec_draft_tokens) << what;
          }
          if (!overlap) one_at_a_time = stats;
          if (overlap && speculative.method == SpeculativeMethod::kDraftModel) {
            EXPECT_EQ(stats.num_spec_draft_tokens, one_at_a_time.num_spec_draft_tokens) << what;
            EXPECT_EQ(stats.num_spec_accepted_tokens, one_at_a_time.num_spec_accepted_tokens) << what;
          }
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
                               (prefix_cache ? " with" : " without") + " prefix cache, overlap scheduling";
      EngineConfig config = base;
      config.speculative = speculative;
      config.overlap_schedule = true;
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
    for (bool overlap : {false, true}) {
      EngineConfig config = small_config(256);
      config.speculative = speculative;
      config.overlap_schedule = overlap;
      expect_same(expected, run(*m.model, *m.backend, config, requests),
                  std::string(speculative_method_name(speculative.method)) + (overlap ? ", overlap" : ""));
    }
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
    config.overlap_schedule = true;
    expect_same(first, run(*m.model, *m.backend, config, requests), "seeded, overlap");
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

// "quantization": "fp8" quantizes the draft model as it loads: the model as its own draft, which keeps every draft
// unquantized, now has some rejected (its FP8 logits round a near tie the other way), and the outputs stay the
// target's.
TEST(SpeculativeDecoding, AnFp8DraftModelKeepsTheTargetsOutputs) {
  auto m = load_fixture_model("llama");
  const auto requests = greedy_requests(repetitive_prompts(9, m.model->config().vocab_size, 3));
  const Outcomes expected = run(*m.model, *m.backend, small_config(256), requests);
  EngineConfig config = small_config(256);
  config.speculative = draft_model("llama", 3);
  EngineStats as_stored;
  expect_same(expected, run(*m.model, *m.backend, config, requests, &as_stored), "bf16 draft");
  EXPECT_EQ(as_stored.num_spec_accepted_tokens, as_stored.num_spec_draft_tokens);
  config.speculative->quantization = OnlineQuantization::fp8;
  EngineStats fp8;
  expect_same(expected, run(*m.model, *m.backend, config, requests, &fp8), "fp8 draft");
  EXPECT_GT(fp8.num_spec_drafts, 0);
  EXPECT_LT(fp8.num_spec_accepted_tokens, fp8.num_spec_draft_tokens);
}

// Batch 64: 64 requests admitted in one step decode together, with prompt lookup and with a draft model (itself:
// every draft kept, and a random-weight one, most rejected), and give the tokens they give without speculation.
TEST(SpeculativeDecoding, SixtyFourConcurrentRequestsKeepTheirTokens) {
  auto m = load_fixture_model("qwen3");
  const auto requests = greedy_requests(repetitive_prompts(64, m.model->config().vocab_size, 13));
  EngineConfig base = small_config(512, 4096);
  base.max_num_seqs = 64;
  const Outcomes expected = run(*m.model, *m.backend, base, requests);
  for (const SpeculativeConfig& speculative : {ngram(3), draft_model("qwen3", 2), draft_model("qwen2", 3)}) {
    const std::string what = std::string(speculative_method_name(speculative.method)) + " from " +
                             speculative.draft_model_dir.filename().string();
    EngineConfig config = base;
    config.speculative = speculative;
    EngineCore core(*m.model, *m.backend, config);
    for (size_t i = 0; i < requests.size(); ++i) core.add_request(i + 1, requests[i]);
    core.step();  // every prompt in one step
    EXPECT_EQ(core.stats().num_running, 64) << what;
    EngineCore fresh(*m.model, *m.backend, config);
    EngineStats stats;
    expect_same(expected, run(fresh, requests, &stats), what);
    EXPECT_GT(stats.num_spec_drafts, 0) << what;
  }
}

// With an FP8 KV cache speculation stays lossless: greedy outputs equal the FP8 engine's own without speculation, for
// prompt lookup, a draft model and DeepSeek-V3's MTP layer. The draft's cache is FP8 too: llama drafting for itself
// then has every draft kept (with a float32 draft cache it would lose some, as FP8 changes most outputs).
TEST(SpeculativeDecoding, Fp8KvCacheKeepsTheOutputsOfTheFp8Engine) {
  const auto check = [](const std::string& name, const std::filesystem::path& dir, const SpeculativeConfig& speculative,
                        bool every_draft_kept = false) {
    auto backend = make_cpu_backend(2);
    auto model = load_model(dir, *backend);
    const auto requests = greedy_requests(repetitive_prompts(9, model->config().vocab_size, 3));
    EngineConfig base = small_config(256);
    base.kv_cache_dtype = KvCacheDtype::fp8_e4m3;
    const Outcomes expected = run(*model, *backend, base, requests);
    EngineConfig config = base;
    config.speculative = speculative;
    EngineStats stats;
    expect_same(expected, run(*model, *backend, config, requests, &stats), name);
    EXPECT_GT(stats.num_spec_accepted_tokens, 0) << name;
    if (every_draft_kept) {
      EXPECT_EQ(stats.num_spec_accepted_tokens, stats.num_spec_draft_tokens) << name;
    }
  };
  check("ngram", fixtures_dir() / "models" / "llama", ngram(3));
  check("draft model", fixtures_dir() / "models" / "llama", draft_model("llama", 3), true);
  const auto mtp = deepseek_v3_with_mtp(MtpLayerKind::oracle);
  check("deepseek_mtp", mtp, deepseek_mtp(mtp, 2));
}

// Speculation on several ranks: tensor-parallel ranks all verify the drafts and the first samples; data-parallel
// ranks (experts shared) verify their own sequences'. A draft model, DeepSeek-V3's and V4's MTP layers and EAGLE-3
// heads under tensor parallelism are loaded on every rank like the target, every rank running every draft forward;
// a draft model under data parallelism is refused at start, naming why.
// Greedy outputs with `speculative` at k = 1 and 4 equal the sharded model's own without speculation, with a small
// pool that preempts; unless the drafts are random (`some_accepted` false), some of them are kept.
void expect_drafts_kept(ShardedModel& model, const std::string& what, int32_t num_blocks,
                        const std::function<SpeculativeConfig(int32_t k)>& speculative, bool some_accepted = true) {
  const auto requests = greedy_requests(repetitive_prompts(6, model.config().vocab_size, 7));
  EngineCore plain(model, small_config(num_blocks, 24));
  const Outcomes expected = run(plain, requests, nullptr);
  for (int32_t k : {1, 4}) {
    EngineConfig config = small_config(num_blocks, 24);
    config.speculative = speculative(k);
    EngineCore core(model, config);
    EngineStats stats;
    expect_same(expected, run(core, requests, &stats), what + ", k=" + std::to_string(k));
    EXPECT_GT(stats.num_spec_drafts, 0) << what;
    if (some_accepted) EXPECT_GT(stats.num_spec_accepted_tokens, 0) << what;
    EXPECT_GT(stats.num_preemptions, 0) << what;
  }
}

void expect_refused(ShardedModel& model, const SpeculativeConfig& speculative, const std::string& what) {
  EngineConfig config = small_config(12, 24);
  config.speculative = speculative;
  try {
    EngineCore core(model, config);
    ADD_FAILURE() << what << " ran";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("speculative decoding runs on one rank"), std::string::npos) << e.what();
  }
}

TEST(SpeculativeDecoding, ParallelRanksVerifyEveryProposersDrafts) {
  auto tensor_parallel = ShardedModel::load(fixtures_dir() / "models" / "llama", "cpu", {.tensor_parallel_size = 2}, 2);
  expect_drafts_kept(*tensor_parallel, "prompt lookup, tensor parallel", 12, ngram);
  expect_drafts_kept(*tensor_parallel, "draft model, tensor parallel", 8,
                     [](int32_t k) { return draft_model("llama", k); });
  // A random EAGLE-3 head drafting with the target's embedding (vocab-parallel shards: its drafts are those of one
  // rank, Eagle3Head.OnTwoTensorParallelRanksMatchesItsDefinition), mostly rejected; the oracle's all kept.
  expect_drafts_kept(*tensor_parallel, "EAGLE-3, tensor parallel", 8,
                     [&](int32_t k) { return eagle3(eagle3_head("llama"), k); }, /*some_accepted=*/false);
  const auto oracle = testing::eagle3_oracle();
  auto oracle_tensor_parallel = ShardedModel::load(oracle.target, "cpu", {.tensor_parallel_size = 2}, 2);
  expect_drafts_kept(*oracle_tensor_parallel, "EAGLE-3 oracle, tensor parallel", 8,
                     [&](int32_t k) { return eagle3(oracle.head, k); });
  auto data_parallel = ShardedModel::load(fixtures_dir() / "models" / "qwen3_moe", "cpu",
                                          {.expert_parallel_size = 2, .data_parallel_size = 2}, 2);
  expect_drafts_kept(*data_parallel, "prompt lookup, data parallel", 6, ngram);  // each rank's pool: half the sequences
  expect_refused(*data_parallel, draft_model("qwen3_moe", 2), "a draft model under data parallelism");
  const auto mtp = deepseek_v3_with_mtp(MtpLayerKind::oracle);
  auto mtp_tensor_parallel = ShardedModel::load(mtp, "cpu", {.tensor_parallel_size = 2}, 2);
  expect_drafts_kept(*mtp_tensor_parallel, "deepseek_mtp, tensor parallel", 8,
                     [&](int32_t k) { return deepseek_mtp(mtp, k); });
  // V4's block: attention and routed experts whole on each rank, its shared expert sharded as the target's.
  const auto v4_mtp = deepseek_v4_with_mtp("compressed_sparse_attention", MtpLayerKind::oracle);
  auto v4_tensor_parallel = ShardedModel::load(v4_mtp, "cpu", {.tensor_parallel_size = 2}, 2);
  expect_drafts_kept(*v4_tensor_parallel, "deepseek_mtp (V4), tensor parallel", 8,
                     [&](int32_t k) { return deepseek_mtp(v4_mtp, k); });
}

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

// Greedy outputs with `speculative(k)` drafting k = 1..max_k tokens (an MTP layer, an EAGLE-3 head) equal those
// without, for request `single` of `all` alone and for all of them; an oracle layer has every draft accepted.
void expect_greedy_outputs_kept(Model& model, Backend& backend,
                                const std::function<SpeculativeConfig(int32_t)>& speculative, int32_t max_k,
                                const std::vector<GenerateRequest>& all, size_t single, bool oracle) {
  const std::vector<GenerateRequest> one(all.begin() + single, all.begin() + single + 1);
  for (const auto* requests : {&one, &all}) {
    const Outcomes expected = run(model, backend, small_config(256), *requests);
    for (int32_t k = 1; k <= max_k; ++k) {
      const std::string what = "k=" + std::to_string(k) + ", batch " + std::to_string(requests->size());
      EngineConfig config = small_config(256);
      config.speculative = speculative(k);
      EngineStats stats;
      expect_same(expected, run(model, backend, config, *requests, &stats), what);
      EXPECT_GT(stats.num_spec_drafts, 0) << what;
      EXPECT_EQ(stats.num_spec_accepted_tokens_per_pos.size(), static_cast<size_t>(k)) << what;
      if (oracle) {
        EXPECT_EQ(stats.num_spec_accepted_tokens, stats.num_spec_draft_tokens) << what;
        // Every decode after the first verifies k drafts, fewer only where max_tokens leaves less room.
        EXPECT_GT(stats.num_spec_draft_tokens, stats.num_spec_drafts * (k - 1)) << what;
      }
    }
  }
}

// With prefix caching on and off, a small pool that preempts and a token budget that chunks prompts, greedy outputs
// with `speculative(k)` for k = min_k..max_k equal those without; an oracle layer has every draft accepted.
void expect_prefix_cache_and_preemption_kept(Model& model, Backend& backend,
                                             const std::function<SpeculativeConfig(int32_t)>& speculative,
                                             int32_t min_k, int32_t max_k, bool oracle) {
  std::vector<GenerateRequest> requests;
  for (const auto& prompt : repetitive_prompts(12, model.config().vocab_size, 8)) requests.push_back(greedy(prompt, 24));
  for (bool prefix_cache : {true, false}) {
    EngineConfig base = small_config(10, 24);
    base.enable_prefix_cache = prefix_cache;
    const Outcomes expected = run(model, backend, base, requests);
    for (int32_t k = min_k; k <= max_k; ++k) {
      const std::string what = "k=" + std::to_string(k) + (prefix_cache ? " with" : " without") + " prefix cache";
      EngineConfig config = base;
      config.speculative = speculative(k);
      EngineStats stats;
      expect_same(expected, run(model, backend, config, requests, &stats), what);
      EXPECT_GT(stats.num_preemptions, 0) << what;
      EXPECT_GT(stats.num_spec_drafts, 0) << what;
      if (prefix_cache) {
        EXPECT_GT(stats.prefix_hit_tokens, 0) << what;
      }
      if (oracle) {
        EXPECT_EQ(stats.num_spec_accepted_tokens, stats.num_spec_draft_tokens) << what;
      }
    }
  }
}

// Stop tokens met mid-output, logprobs, n = 2 and ignore_eos give with `speculative` what they give without.
void expect_stops_logprobs_and_samples_kept(Model& model, Backend& backend, const SpeculativeConfig& speculative) {
  std::vector<GenerateRequest> requests = greedy_requests(repetitive_prompts(6, model.config().vocab_size, 21));
  const Outcomes free_run = run(model, backend, small_config(256), requests);
  for (size_t i = 0; i < requests.size(); ++i) {
    const auto& tokens = free_run.at({i + 1, 0}).tokens;
    requests[i].stop.stop_token_ids = {tokens[tokens.size() / 2]};
    requests[i].sampling.logprobs = 3;
    requests[i].sampling.n = i % 2 == 0 ? 2 : 1;
    requests[i].stop.ignore_eos = i % 3 == 0;
  }
  const Outcomes expected = run(model, backend, small_config(256), requests);
  EngineConfig config = small_config(256);
  config.speculative = speculative;
  expect_same(expected, run(model, backend, config, requests), std::string(speculative_method_name(speculative.method)));
}

// Seeded sampled requests (top-p, a presence penalty on some) give the same tokens run after run.
void expect_seeded_sampling_reproducible(Model& model, Backend& backend, const SpeculativeConfig& speculative) {
  std::vector<GenerateRequest> requests = greedy_requests(repetitive_prompts(4, model.config().vocab_size, 5));
  for (size_t i = 0; i < requests.size(); ++i) {
    requests[i].sampling.temperature = 0.8f;
    requests[i].sampling.top_p = 0.9f;
    requests[i].sampling.seed = 100 + i;
    requests[i].sampling.presence_penalty = i % 2 ? 0.3f : 0.0f;
  }
  EngineConfig config = small_config(256);
  config.speculative = speculative;
  EngineStats stats;
  const Outcomes first = run(model, backend, config, requests, &stats);
  expect_same(first, run(model, backend, config, requests), "seeded");
  EXPECT_GT(stats.num_spec_drafts, 0);
}

// DeepSeek MTP on the DeepSeek-V3 fixture with a next-n layer: `kind` random (drafts mostly rejected) or oracle
// (every draft accepted: the bookkeeping of full acceptance over k positions).
class DeepseekMtpDecoding : public ::testing::TestWithParam<MtpLayerKind> {
 protected:
  void SetUp() override {
    dir_ = deepseek_v3_with_mtp(GetParam());
    backend_ = make_cpu_backend(2);
    model_ = load_model(dir_, *backend_);
  }
  bool oracle() const { return GetParam() == MtpLayerKind::oracle; }

  std::filesystem::path dir_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Model> model_;
};

TEST_P(DeepseekMtpDecoding, GreedyOutputsEqualThoseWithoutForKAndBatchSize) {
  const auto all = greedy_requests(repetitive_prompts(9, model_->config().vocab_size, 3));
  expect_greedy_outputs_kept(*model_, *backend_, [&](int32_t k) { return deepseek_mtp(dir_, k); }, 3, all, 4,
                             oracle());
}

TEST_P(DeepseekMtpDecoding, PrefixCachingChunkedPrefillAndPreemptionGiveTheSameTokens) {
  expect_prefix_cache_and_preemption_kept(*model_, *backend_, [&](int32_t k) { return deepseek_mtp(dir_, k); }, 3, 3,
                                          oracle());
}

TEST_P(DeepseekMtpDecoding, StopTokensMaxTokensLogprobsAndParallelSamplesAsWithout) {
  expect_stops_logprobs_and_samples_kept(*model_, *backend_, deepseek_mtp(dir_, 3));
}

TEST_P(DeepseekMtpDecoding, SeededSampledRequestsAreReproducible) {
  expect_seeded_sampling_reproducible(*model_, *backend_, deepseek_mtp(dir_, 2));
}

// The layer quantized as it loads ("quantization": "fp8", as --quantization fp8 gives it from a bf16 checkpoint;
// deepseek_mtp_test checks that its weights are quantized): the outputs stay the target's.
TEST(DeepseekMtpQuantization, AnFp8LayerKeepsTheTargetsOutputs) {
  const auto dir = deepseek_v3_with_mtp(MtpLayerKind::random);
  auto backend = make_cpu_backend(2);
  auto model = load_model(dir, *backend);
  const auto requests = greedy_requests(repetitive_prompts(9, model->config().vocab_size, 3));
  const Outcomes expected = run(*model, *backend, small_config(256), requests);
  EngineConfig config = small_config(256);
  config.speculative = deepseek_mtp(dir, 2);
  config.speculative->quantization = OnlineQuantization::fp8;
  EngineStats stats;
  expect_same(expected, run(*model, *backend, config, requests, &stats), "fp8 MTP layer");
  EXPECT_GT(stats.num_spec_drafts, 0);
}

INSTANTIATE_TEST_SUITE_P(NextNLayers, DeepseekMtpDecoding,
                         ::testing::Values(MtpLayerKind::random, MtpLayerKind::oracle),
                         [](const auto& info) { return info.param == MtpLayerKind::random ? "Random" : "Oracle"; });

// DeepSeek-V4's MTP block on the V4 fixture in the released names with an mtp.0 block whose attention is a CSA or a
// sliding-window layer's (v4_mtp_checkpoint.h): random (drafts mostly rejected) or oracle (every draft accepted).
// Its drafts read the target's streams and chain through its own.
using V4MtpCase = std::tuple<std::string, MtpLayerKind>;

class DeepseekV4MtpDecoding : public ::testing::TestWithParam<V4MtpCase> {
 protected:
  void SetUp() override {
    dir_ = deepseek_v4_with_mtp(std::get<0>(GetParam()), std::get<1>(GetParam()));
    backend_ = make_cpu_backend(2);
    model_ = load_model(dir_, *backend_);
  }
  bool oracle() const { return std::get<1>(GetParam()) == MtpLayerKind::oracle; }

  std::filesystem::path dir_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Model> model_;
};

TEST_P(DeepseekV4MtpDecoding, GreedyOutputsEqualThoseWithoutForKAndBatchSize) {
  const auto all = greedy_requests(repetitive_prompts(4, model_->config().vocab_size, 5));
  expect_greedy_outputs_kept(*model_, *backend_, [&](int32_t k) { return deepseek_mtp(dir_, k); }, 3, all, 2,
                             oracle());
}

TEST_P(DeepseekV4MtpDecoding, PrefixCachingChunkedPrefillAndPreemptionGiveTheSameTokens) {
  expect_prefix_cache_and_preemption_kept(*model_, *backend_, [&](int32_t k) { return deepseek_mtp(dir_, k); }, 1, 3,
                                          oracle());
}

INSTANTIATE_TEST_SUITE_P(MtpBlocks, DeepseekV4MtpDecoding,
                         ::testing::Combine(::testing::Values("compressed_sparse_attention", "sliding_attention"),
                                            ::testing::Values(MtpLayerKind::random, MtpLayerKind::oracle)),
                         [](const auto& info) {
                           const std::string kind = std::get<1>(info.param) == MtpLayerKind::random ? "Random"
                                                                                                     : "Oracle";
                           return (std::get<0>(info.param) == "sliding_attention" ? "Sliding" : "Csa") + kind;
                         });

// EAGLE-3 on a fixture target with a random head (eagle3_checkpoint.h) reading the inputs of its layers 0, 1 and 2
// (drafts mostly rejected), or, for "oracle", on a bigram copy of the llama fixture with a head that drafts its
// greedy tokens through a permuted draft vocabulary (every draft accepted: the bookkeeping of full acceptance).
class Eagle3Decoding : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    backend_ = make_cpu_backend(2);
    if (oracle()) {
      const auto pair = testing::eagle3_oracle();
      head_ = pair.head;
      model_ = load_model(pair.target, *backend_);
    } else {
      head_ = eagle3_head(GetParam());
      model_ = load_model(fixtures_dir() / "models" / GetParam(), *backend_);
    }
  }
  bool oracle() const { return GetParam() == "oracle"; }

  std::filesystem::path head_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Model> model_;
};

TEST_P(Eagle3Decoding, GreedyOutputsEqualThoseWithoutForKAndBatchSize) {
  const auto all = greedy_requests(repetitive_prompts(9, model_->config().vocab_size, 3));
  expect_greedy_outputs_kept(*model_, *backend_, [&](int32_t k) { return eagle3(head_, k); }, 5, all, 4, oracle());
}

TEST_P(Eagle3Decoding, PrefixCachingChunkedPrefillAndPreemptionGiveTheSameTokens) {
  expect_prefix_cache_and_preemption_kept(*model_, *backend_, [&](int32_t k) { return eagle3(head_, k); }, 1, 5,
                                          oracle());
}

TEST_P(Eagle3Decoding, StopTokensMaxTokensLogprobsAndParallelSamplesAsWithout) {
  expect_stops_logprobs_and_samples_kept(*model_, *backend_, eagle3(head_, 4));
}

TEST_P(Eagle3Decoding, SeededSampledRequestsAreReproducible) {
  expect_seeded_sampling_reproducible(*model_, *backend_, eagle3(head_, 3));
}

INSTANTIATE_TEST_SUITE_P(Targets, Eagle3Decoding, ::testing::Values("llama", "llama3_rope", "qwen3", "oracle"),
                         [](const auto& info) { return info.param; });

TEST(Eagle3Decoding, AMissingHeadOrOneThatDoesNotFitIsRefusedAtStart) {
  auto m = load_fixture_model("llama");
  EngineConfig config = small_config(64);
  const auto expect_refused = [&](const std::filesystem::path& head, const std::string& what) {
    config.speculative = eagle3(head, 3);
    try {
      EngineCore core(*m.model, *m.backend, config);
      ADD_FAILURE() << head << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  expect_refused(fixtures_dir() / "models" / "no-such-head", "eagle3: the head");
  expect_refused(eagle3_head("llama", {.names_layers = false}), "config.json may name them");
  expect_refused(eagle3_head("llama", {.hidden_size = 32}), "differs from the target's 64");
}

// The chi-square statistic's 0.001 critical values for 1..10 degrees of freedom (the seeds are fixed: a correct
// engine passes always).
constexpr double kChiSquareCritical[] = {10.83, 13.82, 16.27, 18.47, 20.52, 22.46, 24.32, 26.12, 27.88, 29.59};

// The oracle target is a bigram model: its logits after token t are lm_head(rms_norm(embed[t]) * norm), computed
// here in float64 from the checkpoint, softmaxed at `temperature` -> [vocab][vocab].
std::vector<std::vector<double>> bigram_probabilities(const std::filesystem::path& dir, double temperature) {
  const Checkpoint checkpoint = Checkpoint::open(dir);
  const auto values = [&](const std::string& name) {
    const TensorInfo& info = checkpoint.get(name);
    std::vector<float> v(static_cast<size_t>(info.numel()));
    dequantize_to_f32(info, v.data());
    return v;
  };
  const auto embed = values("model.embed_tokens.weight");
  const auto head = values("lm_head.weight");
  const auto norm = values("model.norm.weight");
  const size_t hidden = norm.size(), vocab = embed.size() / hidden;
  std::vector<std::vector<double>> probabilities(vocab, std::vector<double>(vocab));
  for (size_t t = 0; t < vocab; ++t) {
    double sum = 0.0;
    for (size_t i = 0; i < hidden; ++i) sum += double(embed[t * hidden + i]) * embed[t * hidden + i];
    const double scale = 1.0 / std::sqrt(sum / hidden + 1e-6);
    std::vector<double> logits(vocab);
    for (size_t v = 0; v < vocab; ++v) {
      double dot = 0.0;
      for (size_t i = 0; i < hidden; ++i) dot += double(head[v * hidden + i]) * embed[t * hidden + i] * scale * norm[i];
      logits[v] = dot / temperature;
    }
    const double top = *std::max_element(logits.begin(), logits.end());
    double total = 0.0;
    for (double& l : logits) total += (l = std::exp(l - top));
    for (size_t v = 0; v < vocab; ++v) probabilities[t][v] = logits[v] / total;
  }
  return probabilities;
}

// The second sampled token is the first verified against a draft (the step after the first token verifies the
// MTP's draft for it): over many seeds its frequencies match the target's marginal, sum over the first token t of
// p(t | prompt) p(. | t).
TEST(DeepseekMtpSampling, TokensAfterDraftsFollowTheTargetsDistribution) {
  const auto dir = deepseek_v3_with_mtp(MtpLayerKind::oracle);
  auto backend = make_cpu_backend(2);
  auto model = load_model(dir, *backend);
  constexpr double kTemperature = 0.5;
  const auto p = bigram_probabilities(dir, kTemperature);
  const std::vector<int32_t> prompt = {22, 506, 217};
  std::vector<double> marginal(p.size(), 0.0);
  for (size_t t = 0; t < p.size(); ++t) {
    for (size_t v = 0; v < p.size(); ++v) marginal[v] += p[prompt.back()][t] * p[t][v];
  }
  constexpr int32_t kSamples = 2000;
  std::vector<GenerateRequest> requests;
  for (int32_t i = 0; i < kSamples; ++i) {
    GenerateRequest request = greedy(prompt, 3);
    request.sampling.temperature = static_cast<float>(kTemperature);
    request.sampling.seed = 1000 + i;
    requests.push_back(std::move(request));
  }
  EngineConfig config = small_config(512, 1024);
  config.speculative = deepseek_mtp(dir, 1);
  EngineStats stats;
  const Outcomes outcomes = run(*model, *backend, config, requests, &stats);
  // Drafts were both kept and replaced (rejection sampling ran both ways).
  EXPECT_GT(stats.num_spec_accepted_tokens, 0);
  EXPECT_LT(stats.num_spec_accepted_tokens, stats.num_spec_draft_tokens);
  std::vector<int64_t> counts(p.size(), 0);
  for (const auto& [key, outcome] : outcomes) ++counts.at(static_cast<size_t>(outcome.tokens.at(1)));
  // The nine likeliest tokens apart, the rest together.
  std::vector<size_t> order(p.size());
  for (size_t v = 0; v < order.size(); ++v) order[v] = v;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return marginal[a] > marginal[b]; });
  double statistic = 0.0, rest_expected = kSamples;
  int64_t rest_count = kSamples;
  for (size_t i = 0; i < 9; ++i) {
    const double e = marginal[order[i]] * kSamples;
    statistic += (counts[order[i]] - e) * (counts[order[i]] - e) / e;
    rest_expected -= e;
    rest_count -= counts[order[i]];
  }
  ASSERT_GT(rest_expected, 5.0);
  statistic += (rest_count - rest_expected) * (rest_count - rest_expected) / rest_expected;
  EXPECT_LT(statistic, kChiSquareCritical[8]) << "chi-square with 9 degrees of freedom";
}

TEST(DeepseekMtpSampling, ACheckpointWithoutTheLayerIsRefusedAtStart) {
  auto m = load_fixture_model("deepseek_v3");
  EngineConfig config = small_config(64);
  config.speculative = deepseek_mtp(fixtures_dir() / "models" / "deepseek_v3", 1);
  try {
    EngineCore core(*m.model, *m.backend, config);
    ADD_FAILURE() << "a checkpoint without its next-n layer was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no multi-token prediction layer"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tern
