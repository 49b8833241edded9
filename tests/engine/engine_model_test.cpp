// The engine end to end on the fixture models with the CPU backend. The reference is greedy_generate (one
// sequence, a KV cache of its own, no scheduler) and, through it, the transformers goldens.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <thread>

#include "core/error.h"
#include "engine/engine.h"
#include "engine/engine_core.h"
#include "fixture_model.h"
#include "fixtures.h"
#include "greedy_request.h"
#include "model/sequence_runner.h"
#include "tokenizer/tokenizer.h"

namespace tern {
namespace {

using testing::fixtures_dir;
using testing::greedy;
using testing::load_fixture_model;

EngineConfig small_config(int32_t num_blocks, bool prefix_cache = true) {
  EngineConfig c;
  c.num_kv_blocks = num_blocks;
  c.enable_prefix_cache = prefix_cache;
  c.max_num_batched_tokens = 256;
  c.log_kv_cache = false;
  return c;
}

struct Finished {
  std::vector<int32_t> tokens;
  std::string text;
  std::optional<FinishReason> finish;
  Usage usage;
};

// Steps the core until every request finished; outputs by (request id, index).
// The outputs of sequence `index` of request `id` (a function, so that test macros see no braced commas).
template <typename Map>
auto& entry(Map& results, uint64_t id, int32_t index) {
  return results[{id, index}];
}
template <typename Map>
auto entry(Map&& results, uint64_t id, int32_t index) {
  return results[{id, index}];
}

std::map<std::pair<uint64_t, int32_t>, Finished> drain(EngineCore& core) {
  std::map<std::pair<uint64_t, int32_t>, Finished> results;
  while (core.has_unfinished_requests()) {
    for (const auto& out : core.step()) {
      auto& f = entry(results, out.request_id, out.index);
      f.tokens.insert(f.tokens.end(), out.token_ids.begin(), out.token_ids.end());
      f.text += out.text;
      if (out.finish_reason) f.finish = out.finish_reason;
      f.usage = out.usage;
    }
  }
  return results;
}

std::vector<std::vector<int32_t>> random_prompts(int count, int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(vocab - 1));
  std::vector<std::vector<int32_t>> prompts(count);
  for (int i = 0; i < count; ++i) {
    prompts[i].resize(1 + (i * 7) % 45);
    for (auto& t : prompts[i]) t = token(rng);
  }
  return prompts;
}

class EngineArch : public ::testing::TestWithParam<std::string> {};

TEST_P(EngineArch, GreedyMatchesTheTransformersGoldens) {
  auto m = load_fixture_model(GetParam());
  const auto golden = testing::read_json(fixtures_dir() / "models" / GetParam() / "golden.json");
  EngineCore core(*m.model, *m.backend, small_config(64));
  for (size_t p = 0; p < golden["prompts"].size(); ++p) {
    core.add_request(p + 1, greedy(golden["prompts"][p].get<std::vector<int32_t>>(), 24));
  }
  auto results = drain(core);
  for (size_t p = 0; p < golden["prompts"].size(); ++p) {
    EXPECT_EQ(entry(results, p + 1, 0).tokens, golden["greedy_24"][p].get<std::vector<int32_t>>()) << "prompt " << p;
  }
}

TEST_P(EngineArch, ThirtyTwoConcurrentRequestsEqualEachRunAlone) {
  auto m = load_fixture_model(GetParam());
  const auto prompts = random_prompts(32, m.model->config().vocab_size, 11);
  EngineCore core(*m.model, *m.backend, small_config(256));
  for (size_t i = 0; i < prompts.size(); ++i) core.add_request(i + 1, greedy(prompts[i], 4 + static_cast<int32_t>(i % 13)));
  auto results = drain(core);
  for (size_t i = 0; i < prompts.size(); ++i) {
    const auto alone = greedy_generate(*m.model, *m.backend, prompts[i], 4 + static_cast<int64_t>(i % 13));
    EXPECT_EQ(entry(results, i + 1, 0).tokens, alone) << "request " << i;
  }
}

TEST_P(EngineArch, APoolFarSmallerThanTheLoadPreemptsAndStillMatches) {
  auto m = load_fixture_model(GetParam());
  const auto prompts = random_prompts(16, m.model->config().vocab_size, 5);
  for (bool prefix_cache : {false, true}) {
    EngineCore core(*m.model, *m.backend, small_config(8, prefix_cache));  // 128 tokens for ~700 of load
    for (size_t i = 0; i < prompts.size(); ++i) core.add_request(i + 1, greedy(prompts[i], 20));
    auto results = drain(core);
    EXPECT_GT(core.stats().num_preemptions, 0);
    for (size_t i = 0; i < prompts.size(); ++i) {
      EXPECT_EQ(entry(results, i + 1, 0).tokens, greedy_generate(*m.model, *m.backend, prompts[i], 20))
          << "request " << i << (prefix_cache ? " with" : " without") << " prefix cache";
    }
    EXPECT_EQ(core.kv_cache_manager().num_available_blocks(), 8);
    if (!prefix_cache) {
      EXPECT_EQ(core.kv_cache_manager().num_free_blocks(), 8);
    }
  }
}

// --kv-cache-dtype fp8_e4m3: the engine's requests, with preemption, prefix caching and chunked prefill, give the
// tokens of each run alone on an FP8 cache; their prompts' KV takes a quarter of float32's bytes where layers keep
// no float32 state (DeepSeek-V4's compressors do).
TEST_P(EngineArch, Fp8KvCacheRequestsEqualEachRunAloneOnAnFp8Cache) {
  auto m = load_fixture_model(GetParam());
  const auto layers = m.model->kv_layers();
  const int64_t f32_bytes = measure_kv_bytes_per_token(*m.backend, layers, 16);
  const int64_t fp8_bytes = measure_kv_bytes_per_token(*m.backend, layers, 16, KvCacheDtype::fp8_e4m3);
  int64_t state_bytes = 0;
  const auto groups = kv_cache_groups(layers);
  for (int layer : groups.front().layers) state_bytes += layers[layer].state_dim * 4;
  EXPECT_EQ(fp8_bytes * 4, f32_bytes + 3 * state_bytes);
  const auto prompts = random_prompts(12, m.model->config().vocab_size, 5);
  EngineConfig config = small_config(8);
  config.kv_cache_dtype = KvCacheDtype::fp8_e4m3;
  config.max_num_batched_tokens = 32;
  EngineCore core(*m.model, *m.backend, config);
  for (size_t i = 0; i < prompts.size(); ++i) core.add_request(i + 1, greedy(prompts[i], 16));
  auto results = drain(core);
  EXPECT_GT(core.stats().num_preemptions, 0);
  size_t differ_from_float32 = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const auto alone = greedy_generate(*m.model, *m.backend, prompts[i], 16, KvCacheDtype::fp8_e4m3);
    EXPECT_EQ(entry(results, i + 1, 0).tokens, alone) << "request " << i;
    differ_from_float32 += alone != greedy_generate(*m.model, *m.backend, prompts[i], 16);
  }
  std::printf("%s: %zu of %zu greedy outputs change with an FP8 KV cache\n", GetParam().c_str(), differ_from_float32,
              prompts.size());
  EXPECT_GT(differ_from_float32, 0u) << "the cache rounds to e4m3 (random weights leave near ties everywhere)";
}

// A second prompt sharing a 40-token prefix with the first, and a second turn of the first conversation, reuse
// cached blocks and still give the tokens of a run alone. DeepSeek-V4 shares less (its indexer's ties depend on the
// prompt past index_topk entries; KvLayerSpec::shareable_prefix_tokens) but must still hit.
TEST_P(EngineArch, APrefixSharedWithAnEarlierRequestIsReusedAndGivesTheSameTokens) {
  auto m = load_fixture_model(GetParam());
  std::vector<int32_t> prefix(40);
  std::mt19937 rng(9);
  for (auto& t : prefix) t = static_cast<int32_t>(rng() % m.model->config().vocab_size);
  auto first = prefix;
  first.insert(first.end(), {1, 2, 3});
  auto second = prefix;
  second.insert(second.end(), {4, 5, 6, 7});
  EngineCore core(*m.model, *m.backend, small_config(64));
  core.add_request(1, greedy(first, 8));
  auto results = drain(core);
  core.add_request(2, greedy(second, 8));
  auto second_results = drain(core);
  EXPECT_GT(entry(second_results, 2, 0).usage.cached_tokens, 0);
  EXPECT_EQ(entry(second_results, 2, 0).tokens, greedy_generate(*m.model, *m.backend, second, 8));

  auto turn2 = first;
  turn2.insert(turn2.end(), entry(results, 1, 0).tokens.begin(), entry(results, 1, 0).tokens.end());
  turn2.insert(turn2.end(), {9, 10, 11, 12, 13});
  core.add_request(3, greedy(turn2, 8));
  auto third = drain(core);
  EXPECT_GT(entry(third, 3, 0).usage.cached_tokens, 0);
  EXPECT_EQ(entry(third, 3, 0).tokens, greedy_generate(*m.model, *m.backend, turn2, 8));
}

INSTANTIATE_TEST_SUITE_P(Dense, EngineArch, ::testing::Values("llama", "llama3_rope", "qwen2", "qwen3"));
INSTANTIATE_TEST_SUITE_P(Moe, EngineArch,
                         ::testing::Values("qwen3_moe", "mixtral", "deepseek_v3", "gpt_oss", "deepseek_v4"));

// The engine's KV bytes per token (what sizes the pool and is logged at start) against config.json, in float32
// (the CPU backend's element): MLA caches kv_lora_rank + qk_rope_head_dim per layer, not heads x head dims.
TEST(EngineKvBytes, MlaCachesTheLatentAndTheRopeKeyPerLayer) {
  auto m = load_fixture_model("deepseek_v3");
  const auto config = testing::read_json(fixtures_dir() / "models" / "deepseek_v3" / "config.json");
  const int64_t latent = config["kv_lora_rank"].get<int64_t>() + config["qk_rope_head_dim"].get<int64_t>();
  const int64_t expanded = 2 * config["num_attention_heads"].get<int64_t>() *
                           (config["qk_nope_head_dim"].get<int64_t>() + config["qk_rope_head_dim"].get<int64_t>());
  const int64_t layers = config["num_hidden_layers"].get<int64_t>();
  const int64_t bytes = measure_kv_bytes_per_token(*m.backend, m.model->kv_layers(), 16);
  EXPECT_EQ(bytes, layers * latent * 4);
  EXPECT_LT(bytes, layers * expanded * 4);
}

TEST(EngineKvBytes, GqaCachesKeysAndValuesOfTheKvHeads) {
  auto m = load_fixture_model("qwen3");
  const auto config = testing::read_json(fixtures_dir() / "models" / "qwen3" / "config.json");
  const int64_t per_layer = 2 * config["num_key_value_heads"].get<int64_t>() * config["head_dim"].get<int64_t>();
  EXPECT_EQ(measure_kv_bytes_per_token(*m.backend, m.model->kv_layers(), 16),
            config["num_hidden_layers"].get<int64_t>() * per_layer * 4);
}

// gpt-oss alternates sliding and full layers: two KV cache groups, the sliding layers storing their blocks in the
// full layers' tensors, so a block id costs half of the layers' bytes per token.
TEST(EngineKvBytes, GptOssSlidingLayersShareTheFullLayersStorage) {
  auto m = load_fixture_model("gpt_oss");
  const auto config = testing::read_json(fixtures_dir() / "models" / "gpt_oss" / "config.json");
  const int64_t per_layer = 2 * config["num_key_value_heads"].get<int64_t>() * config["head_dim"].get<int64_t>();
  const auto layers = m.model->kv_layers();
  ASSERT_EQ(kv_cache_groups(layers).size(), 2u);
  EXPECT_EQ(measure_kv_bytes_per_token(*m.backend, layers, 16),
            config["num_hidden_layers"].get<int64_t>() / 2 * per_layer * 4);
  EXPECT_EQ(measure_kv_bytes_per_token(*m.backend, layers, 16), kv_bytes_per_token(layers, 4));
}

// gpt-oss's golden prompt of 40 tokens and 24 greedy tokens (window 8, blocks of 16): the full layers' group holds
// every block of the sequence, the sliding layers' group only the blocks of the window that the step's first query
// reads from, [position - 7, ...]. By that definition the sequence holds at most 6 blocks at any step (3 + 3 at the
// prefill, 4 + 2 from token 48 on), where one table for both layers would reach 8; the tokens stay the goldens'.
TEST(Engine, GptOssReturnsSlidingBlocksPastTheWindowToThePoolAndKeepsTheGoldens) {
  auto m = load_fixture_model("gpt_oss");
  const auto golden = testing::read_json(fixtures_dir() / "models" / "gpt_oss" / "golden.json");
  const auto prompt = golden["prompts"][2].get<std::vector<int32_t>>();
  ASSERT_EQ(prompt.size(), 40u);
  EngineCore core(*m.model, *m.backend, small_config(64, false));
  core.add_request(1, greedy(prompt, 24));
  std::vector<int32_t> tokens;
  int32_t min_free = core.kv_cache_manager().num_free_blocks();
  while (core.has_unfinished_requests()) {
    for (const auto& out : core.step()) tokens.insert(tokens.end(), out.token_ids.begin(), out.token_ids.end());
    if (core.has_unfinished_requests()) min_free = std::min(min_free, core.kv_cache_manager().num_free_blocks());
  }
  EXPECT_EQ(tokens, golden["greedy_24"][2].get<std::vector<int32_t>>());
  EXPECT_EQ(min_free, 64 - 6);
  EXPECT_EQ(core.kv_cache_manager().num_free_blocks(), 64);
}

// DeepSeek-V4 also caches its compressors' per-token state: the measure must count it (deepseek_v4_test.cpp checks
// the layer specs themselves against the config).
TEST(EngineKvBytes, DeepseekV4CountsTheCompressorStates) {
  auto m = load_fixture_model("deepseek_v4");
  const auto layers = m.model->kv_layers();
  int64_t keys_only = 0;
  for (const auto& layer : layers) keys_only += layer.num_kv_heads * layer.key_dim * 4;
  const int64_t bytes = measure_kv_bytes_per_token(*m.backend, layers, 16);
  EXPECT_EQ(bytes, kv_bytes_per_token(layers, 4));
  EXPECT_GT(bytes, keys_only);
}

// A gpt-oss prompt of 100 tokens and 20 more in 10 blocks of 16: at most 8 full-layer blocks and 2 of the window at
// a time, but computing the prompt in one chunk would take 7 + 7 blocks. The scheduler computes it in chunks that
// fit (80 tokens in 5 + 5 blocks, then 20 more once the sliding blocks before the window are dropped), as it would
// recompute a long preempted sequence, and the tokens match the run alone.
TEST(Engine, GptOssComputesAPromptInChunksThatFitThePool) {
  auto m = load_fixture_model("gpt_oss");
  std::vector<int32_t> prompt(100);
  std::mt19937 rng(4);
  for (auto& t : prompt) t = static_cast<int32_t>(rng() % m.model->config().vocab_size);
  EngineCore core(*m.model, *m.backend, small_config(10, false));
  core.add_request(1, greedy(prompt, 20));
  auto results = drain(core);
  EXPECT_EQ(entry(results, 1, 0).tokens, greedy_generate(*m.model, *m.backend, prompt, 20));
  EXPECT_EQ(core.kv_cache_manager().num_free_blocks(), 10);
}

TEST(Engine, ASharedPrefixIsComputedOnceAndGivesTheSameTokens) {
  auto m = load_fixture_model("llama");
  std::vector<int32_t> prefix(40);
  std::mt19937 rng(9);
  for (auto& t : prefix) t = static_cast<int32_t>(rng() % 512);
  auto first = prefix;
  first.insert(first.end(), {1, 2, 3});
  auto second = prefix;
  second.insert(second.end(), {4, 5, 6, 7});
  EngineCore core(*m.model, *m.backend, small_config(64));
  core.add_request(1, greedy(first, 8));
  auto results = drain(core);
  const int64_t computed_before = core.stats().num_computed_tokens;
  core.add_request(2, greedy(second, 8));
  auto second_results = drain(core);
  EXPECT_EQ(entry(second_results, 2, 0).usage.cached_tokens, 32);  // two whole blocks of 16 of the shared 40
  EXPECT_EQ(core.stats().num_computed_tokens - computed_before, static_cast<int64_t>(second.size()) - 32 + 7);
  EXPECT_EQ(entry(second_results, 2, 0).tokens, greedy_generate(*m.model, *m.backend, second, 8));
  EXPECT_GT(core.stats().prefix_hit_rate, 0.0);

  // Turn two of the first conversation: its prompt and answer are cached (all but the last answer token).
  auto turn2 = first;
  turn2.insert(turn2.end(), entry(results, 1, 0).tokens.begin(), entry(results, 1, 0).tokens.end());
  turn2.insert(turn2.end(), {9, 10, 11, 12, 13});
  core.add_request(3, greedy(turn2, 8));
  auto third = drain(core);
  EXPECT_EQ(entry(third, 3, 0).usage.cached_tokens, (static_cast<int32_t>(first.size()) + 8 - 1) / 16 * 16);
  EXPECT_EQ(entry(third, 3, 0).tokens, greedy_generate(*m.model, *m.backend, turn2, 8));
}

GenerateRequest seeded(std::vector<int32_t> prompt, uint64_t seed, int32_t n = 1) {
  GenerateRequest r;
  r.prompt_token_ids = std::move(prompt);
  r.sampling.temperature = 0.9f;
  r.sampling.top_k = 40;
  r.sampling.top_p = 0.95f;
  r.sampling.seed = seed;
  r.sampling.n = n;
  r.sampling.logprobs = 2;
  r.stop.max_tokens = 16;
  r.stop.ignore_eos = true;
  return r;
}

TEST(Engine, SeededSamplingIsReproducibleWhateverTheBatch) {
  auto m = load_fixture_model("qwen3");
  const auto prompts = random_prompts(12, m.model->config().vocab_size, 21);
  EngineCore alone(*m.model, *m.backend, small_config(128));
  alone.add_request(1, seeded(prompts[5], 42));
  const auto reference = entry(drain(alone), 1, 0).tokens;
  ASSERT_EQ(reference.size(), 16u);

  EngineCore crowded(*m.model, *m.backend, small_config(128));
  for (size_t i = 0; i < prompts.size(); ++i) crowded.add_request(i + 1, seeded(prompts[i], 1000 + i));
  crowded.add_request(100, seeded(prompts[5], 42));
  auto results = drain(crowded);
  EXPECT_EQ(entry(results, 100, 0).tokens, reference);
  EXPECT_NE(entry(results, 6, 0).tokens, reference);  // same prompt, other seed
}

TEST(Engine, ParallelSamplesShareThePromptAndTheFirstEqualsNEqualsOne) {
  auto m = load_fixture_model("qwen2");
  const auto prompt = random_prompts(8, m.model->config().vocab_size, 2)[6];  // 43 tokens
  EngineCore single(*m.model, *m.backend, small_config(128));
  single.add_request(1, seeded(prompt, 7));
  const auto first = entry(drain(single), 1, 0).tokens;

  EngineCore core(*m.model, *m.backend, small_config(128));
  core.add_request(1, seeded(prompt, 7, 4));
  auto results = drain(core);
  EXPECT_EQ(entry(results, 1, 0).tokens, first);
  EXPECT_EQ(entry(results, 1, 3).usage.completion_tokens, 64);
  EXPECT_NE(entry(results, 1, 1).tokens, entry(results, 1, 2).tokens);
  // 43 prompt tokens once, the 11 past the two shared blocks for each fork, 15 decodes each.
  EXPECT_EQ(core.stats().num_computed_tokens, 43 + 3 * 11 + 4 * 15);
}

TEST(Engine, ThreadedSubmitStreamsAndCancel) {
  auto m = load_fixture_model("llama");
  const auto prompts = random_prompts(6, m.model->config().vocab_size, 8);
  Engine engine(*m.model, *m.backend, small_config(128));
  std::vector<std::shared_ptr<RequestStream>> streams(prompts.size());
  std::vector<std::thread> clients;
  for (size_t i = 0; i < prompts.size(); ++i) {
    clients.emplace_back([&, i] { streams[i] = engine.submit(greedy(prompts[i], 10)); });
  }
  for (auto& t : clients) t.join();
  auto endless = engine.submit(greedy({1, 2, 3}, 400));
  for (size_t i = 0; i < prompts.size(); ++i) {
    std::vector<int32_t> tokens;
    std::optional<FinishReason> finish;
    while (auto out = streams[i]->next()) {
      tokens.insert(tokens.end(), out->token_ids.begin(), out->token_ids.end());
      finish = out->finish_reason;
    }
    EXPECT_EQ(tokens, greedy_generate(*m.model, *m.backend, prompts[i], 10)) << "request " << i;
    EXPECT_EQ(finish, FinishReason::kLength);
  }
  ASSERT_TRUE(endless->next());
  endless->cancel();
  std::optional<FinishReason> finish;
  int32_t completion_tokens = 0;
  while (auto out = endless->next()) {
    finish = out->finish_reason;
    completion_tokens = out->usage.completion_tokens;
  }
  EXPECT_EQ(finish, FinishReason::kAbort);
  EXPECT_LT(completion_tokens, 400);
  EXPECT_THROW(engine.submit(greedy({}, 1)), Error);
  EXPECT_THROW(engine.submit(greedy({100000}, 1)), Error);
  // Stats are published after each loop iteration; the cancel is processed before the next one.
  for (int i = 0; i < 100 && engine.stats().num_running > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  const auto stats = engine.stats();
  EXPECT_EQ(stats.num_running, 0);
  EXPECT_EQ(stats.num_free_kv_blocks, stats.num_kv_blocks);
}

TEST(Engine, DetokenizedTextAndStopStringsWithTheRealTokenizer) {
  auto m = load_fixture_model("tern-py-13m");
  const auto dir = fixtures_dir() / "models" / "tern-py-13m";
  const auto tokenizer = Tokenizer::load(dir);
  const auto golden = testing::read_json(dir / "golden.json");
  const auto prompt = golden["prompts"][0].get<std::vector<int32_t>>();
  const auto expected_tokens = golden["greedy_32"][0].get<std::vector<int32_t>>();
  const std::string expected_text = tokenizer.decode(expected_tokens, true);

  EngineCore core(*m.model, *m.backend, small_config(64), tokenizer_text_streams(tokenizer));
  core.add_request(1, greedy(prompt, 32));
  auto stopped = greedy(prompt, 32);
  const std::string stop = expected_text.substr(expected_text.size() / 2, 4);
  stopped.stop.stop_strings = {stop};
  core.add_request(2, stopped);
  auto results = drain(core);
  EXPECT_EQ(entry(results, 1, 0).tokens, expected_tokens);
  EXPECT_EQ(entry(results, 1, 0).text, expected_text);
  EXPECT_EQ(entry(results, 2, 0).text, expected_text.substr(0, expected_text.find(stop))) << "stop '" << stop << "'";
  EXPECT_EQ(entry(results, 2, 0).finish, FinishReason::kStop);
}

}  // namespace
}  // namespace tern
