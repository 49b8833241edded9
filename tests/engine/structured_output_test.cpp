// Constrained decoding end to end: the random-weight Qwen3 chat fixture (the real 152K vocabulary, garbage text
// unconstrained) must produce, for every schema / regex / grammar and every sampling method, outputs that a real
// JSON Schema validator (ajv) or PCRE2 accepts, ending with EOS exactly where the output is complete.
#include <gtest/gtest.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <nlohmann/json.hpp>

#include "engine/engine_core.h"
#include "fixtures.h"
#include "grammar/compiled_grammar.h"
#include "grammar/json_validator.h"
#include "tokenizer/tokenizer.h"

namespace tern {
namespace {

using grammar::GrammarKind;
using testing::fixtures_dir;

struct Fixture {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tokenizer;
  std::shared_ptr<const grammar::TokenVocabulary> vocabulary;
};

const Fixture& qwen3_chat() {
  static const Fixture fixture = [] {
    Fixture f;
    const auto dir = fixtures_dir() / "models" / "qwen3-chat-tiny";
    f.backend = make_cpu_backend(1);
    f.model = load_model(dir, *f.backend);
    f.tokenizer = std::make_unique<Tokenizer>(Tokenizer::load(dir));
    std::vector<std::string> bytes(static_cast<size_t>(f.tokenizer->vocab_size()));
    for (int32_t id = 0; id < f.tokenizer->vocab_size(); ++id) {
      if (!f.tokenizer->is_special(id)) bytes[static_cast<size_t>(id)] = f.tokenizer->token_bytes(id);
    }
    f.vocabulary = std::make_shared<const grammar::TokenVocabulary>(std::move(bytes), f.model->config().eos_token_ids);
    return f;
  }();
  return fixture;
}

EngineConfig config(int32_t num_blocks) {
  EngineConfig c;
  c.num_kv_blocks = num_blocks;
  c.max_num_batched_tokens = 256;
  c.log_kv_cache = false;
  return c;
}

// The sampling methods every constraint is run under.
std::vector<SamplingParams> sampling_methods() {
  std::vector<SamplingParams> methods;
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  methods.push_back(greedy);
  SamplingParams random;  // temperature 1: the random model's choices are close to uniform over allowed tokens
  random.n = 3;
  random.seed = 7;
  methods.push_back(random);
  SamplingParams filtered;
  filtered.temperature = 0.7f;
  filtered.top_k = 50;
  filtered.top_p = 0.9f;
  filtered.min_p = 0.01f;
  filtered.seed = 11;
  methods.push_back(filtered);
  SamplingParams penalized;
  penalized.temperature = 1.3f;
  penalized.repetition_penalty = 1.2f;
  penalized.frequency_penalty = 0.5f;
  penalized.presence_penalty = 0.5f;
  penalized.logprobs = 3;
  penalized.seed = 5;
  methods.push_back(penalized);
  return methods;
}

struct Generated {
  std::vector<std::string> texts;  // without the EOS (and without the reasoning, when the constraint follows it)
  std::vector<std::string> failures;
  std::vector<size_t> reasoning_lens;  // tokens before the end-of-reasoning marker, when the constraint follows it
  int64_t num_spec_drafts = 0;  // verify chunks, with speculation
};

// A constraint that applies after the model's reasoning, which ends with `marker` (Qwen3's </think>). Random weights
// rarely write it: `marker_bias` on its logit makes it come after a few tokens.
struct AfterReasoning {
  int32_t marker = 0;
  float marker_bias = 0.0f;
};

// Runs every sampling method over a few prompts with the constraint; every output must end with an EOS. The greedy
// method's outputs come first.
Generated generate(GrammarKind kind, const std::string& source, int32_t num_blocks = 512,
                   std::optional<AfterReasoning> after_reasoning = std::nullopt,
                   std::optional<SpeculativeConfig> speculative = std::nullopt) {
  const Fixture& f = qwen3_chat();
  auto constraint = grammar::CompiledGrammar::compile(kind, source, f.vocabulary);
  EngineConfig engine_config = config(num_blocks);
  engine_config.speculative = speculative;
  EngineCore core(*f.model, *f.backend, engine_config);
  uint64_t next_id = 1;
  std::map<std::pair<uint64_t, int32_t>, std::vector<int32_t>> tokens;
  std::map<std::pair<uint64_t, int32_t>, std::vector<TokenLogprob>> logprobs;
  std::map<std::pair<uint64_t, int32_t>, FinishReason> finish;
  for (const auto& method : sampling_methods()) {
    for (int p = 0; p < 3; ++p) {
      GenerateRequest request;
      request.prompt_token_ids = f.tokenizer->encode("Answer in the required format, example " + std::to_string(p), false);
      request.sampling = method;
      request.sampling.constraint = constraint;
      if (after_reasoning) {
        request.sampling.constraint_after = ReasoningEndMarker{{after_reasoning->marker}, {}, 0};
        request.sampling.logit_bias.emplace_back(after_reasoning->marker, after_reasoning->marker_bias);
      }
      request.stop.max_tokens = 400;
      core.add_request(next_id++, std::move(request));
    }
  }
  while (core.has_unfinished_requests()) {
    for (auto& out : core.step()) {
      const auto key = std::make_pair(out.request_id, out.index);
      EXPECT_TRUE(out.error.empty()) << out.error;
      auto& t = tokens[key];
      t.insert(t.end(), out.token_ids.begin(), out.token_ids.end());
      auto& l = logprobs[key];
      l.insert(l.end(), out.logprobs.begin(), out.logprobs.end());
      if (out.finish_reason) finish[key] = *out.finish_reason;
    }
  }
  Generated generated;
  generated.num_spec_drafts = core.stats().num_spec_drafts;
  for (auto& [key, ids] : tokens) {
    const std::string label = fmt::format("request {} sequence {}", key.first, key.second);
    if (finish[key] != FinishReason::kStop || ids.empty() || !f.vocabulary->is_eos(ids.back())) {
      generated.failures.push_back(label + " did not end with EOS: " + f.tokenizer->decode(ids, false));
      continue;
    }
    for (const auto& entry : logprobs[key]) {
      // Logprobs come from the masked logits: every reported alternative is a token the grammar allowed.
      if (!std::isfinite(entry.logprob)) generated.failures.push_back(label + ": a sampled token has logprob -inf");
      for (const auto& [id, value] : entry.top) {
        if (!std::isfinite(value)) generated.failures.push_back(label + ": a top logprob is -inf");
      }
    }
    ids.pop_back();
    if (after_reasoning) {
      const auto marker = std::find(ids.begin(), ids.end(), after_reasoning->marker);
      if (marker == ids.end()) {
        generated.failures.push_back(label + " ended without ending its reasoning: " + f.tokenizer->decode(ids, false));
        continue;
      }
      generated.reasoning_lens.push_back(static_cast<size_t>(marker - ids.begin()));
      ids.erase(ids.begin(), marker + 1);
    }
    generated.texts.push_back(f.tokenizer->decode(ids, false));
  }
  return generated;
}

void expect_no_failures(const Generated& generated) {
  for (const auto& failure : generated.failures) ADD_FAILURE() << failure;
  EXPECT_EQ(generated.texts.size(), 4u * 3u + 2u * 3u);  // 4 methods x 3 prompts, the n=3 method adds 2 x 3
}

TEST(StructuredOutput, JsonSchemaOutputsValidateWithAjv) {
  const std::vector<std::pair<std::string, nlohmann::json>> schemas = {
      {"flat", nlohmann::json::parse(R"({"type": "object", "properties": {
          "name": {"type": "string", "maxLength": 8}, "age": {"type": "integer", "minimum": 0, "maximum": 120},
          "ok": {"type": "boolean"}}, "required": ["name", "age", "ok"], "additionalProperties": false})")},
      {"nested", nlohmann::json::parse(R"({"type": "object", "properties": {
          "status": {"enum": ["active", "inactive", 3, null]},
          "point": {"type": "object", "properties": {"x": {"type": "number", "minimum": -5, "maximum": 5},
                                                    "y": {"type": "integer"}}, "required": ["x", "y"]},
          "tags": {"type": "array", "items": {"type": "string", "pattern": "^[a-z]{1,4}$"}, "minItems": 1,
                   "maxItems": 3},
          "id": {"type": "string", "format": "uuid"}},
        "required": ["status", "point", "tags", "id"]})")},
      {"refs", nlohmann::json::parse(R"({"$defs": {"leaf": {"anyOf": [{"type": "integer", "minimum": 1,
          "maximum": 9}, {"const": "none"}]}}, "type": "array", "items": {"$ref": "#/$defs/leaf"},
          "maxItems": 4})")},
  };
  std::vector<testing::SchemaInstances> cases;
  for (const auto& [name, schema] : schemas) {
    Generated generated = generate(GrammarKind::kJsonSchema, schema.dump());
    expect_no_failures(generated);
    cases.push_back({name, schema, generated.texts});
  }
  testing::expect_valid_with_ajv(cases, "engine_structured_output");
}

// With speculation (n-gram drafts and a draft model) a schema-constrained output is as valid, and greedy ones are
// token for token those without it: drafts pass the grammar mask as one-token steps would.
TEST(StructuredOutput, JsonSchemaOutputsWithSpeculationValidateAndKeepGreedyOutputs) {
  const nlohmann::json schema = nlohmann::json::parse(R"({"type": "object", "properties": {
      "name": {"type": "string", "maxLength": 12}, "tags": {"type": "array", "items": {"enum": ["ab", "abc", "b"]},
      "maxItems": 6}, "n": {"type": "integer", "minimum": 0, "maximum": 999}},
      "required": ["name", "tags", "n"], "additionalProperties": false})");
  const Generated plain = generate(GrammarKind::kJsonSchema, schema.dump());
  expect_no_failures(plain);
  SpeculativeConfig ngram;
  ngram.method = SpeculativeMethod::kNgram;
  ngram.num_speculative_tokens = 3;
  ngram.prompt_lookup_min = 1;
  ngram.prompt_lookup_max = 3;
  SpeculativeConfig draft;
  draft.method = SpeculativeMethod::kDraftModel;
  draft.num_speculative_tokens = 3;
  draft.draft_model_dir = fixtures_dir() / "models" / "qwen3-chat-tiny";
  std::vector<testing::SchemaInstances> cases{{"without speculation", schema, plain.texts}};
  for (const SpeculativeConfig& speculative : {ngram, draft}) {
    const std::string label(speculative_method_name(speculative.method));
    const Generated generated = generate(GrammarKind::kJsonSchema, schema.dump(), 512, std::nullopt, speculative);
    expect_no_failures(generated);
    EXPECT_GT(generated.num_spec_drafts, 0) << label;
    for (size_t i = 0; i < 3 && i < generated.texts.size(); ++i) {
      EXPECT_EQ(generated.texts[i], plain.texts[i]) << label << ", greedy prompt " << i;
    }
    cases.push_back({label, schema, generated.texts});
  }
  testing::expect_valid_with_ajv(cases, "engine_structured_output_speculative");
}

TEST(StructuredOutput, RegexOutputsMatchPcre2) {
  for (const std::string pattern : {R"([A-Z][a-z]{1,6} \d{1,3}(\.\d\d)?)", R"((yes|no|maybe), (red|green|blue))",
                                    R"([0-9]{4}-[0-9]{2}-[0-9]{2})"}) {
    Generated generated = generate(GrammarKind::kRegex, pattern);
    expect_no_failures(generated);
    int error = 0;
    PCRE2_SIZE offset = 0;
    const std::string anchored = "^(?:" + pattern + ")$";
    pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(anchored.c_str()), anchored.size(), PCRE2_UTF,
                                     &error, &offset, nullptr);
    ASSERT_NE(code, nullptr);
    pcre2_match_data* match = pcre2_match_data_create_from_pattern(code, nullptr);
    for (const auto& text : generated.texts) {
      EXPECT_GE(pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(text.c_str()), text.size(), 0, 0, match, nullptr), 0)
          << "'" << text << "' does not match " << pattern;
    }
    pcre2_match_data_free(match);
    pcre2_code_free(code);
  }
}

TEST(StructuredOutput, EbnfOutputsFollowTheGrammar) {
  // Checked against the same language written as a PCRE2 regex: an independent matcher.
  const std::string grammar = R"(root ::= greeting ", " list
greeting ::= "hello" | "goodbye"
list ::= "[" item (";" item){0,2} "]"
item ::= [a-c]{1,3} | "x" [0-9]
)";
  Generated generated = generate(GrammarKind::kEbnf, grammar);
  expect_no_failures(generated);
  int error = 0;
  PCRE2_SIZE offset = 0;
  const std::string regex = R"(^(hello|goodbye), \[([a-c]{1,3}|x[0-9])(;([a-c]{1,3}|x[0-9])){0,2}\]$)";
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(regex.c_str()), regex.size(), 0, &error, &offset, nullptr);
  ASSERT_NE(code, nullptr);
  pcre2_match_data* match = pcre2_match_data_create_from_pattern(code, nullptr);
  for (const auto& text : generated.texts) {
    EXPECT_GE(pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(text.c_str()), text.size(), 0, 0, match, nullptr), 0)
        << "'" << text << "'";
  }
  pcre2_match_data_free(match);
  pcre2_code_free(code);
}

TEST(StructuredOutput, PreemptedSequencesKeepTheirGrammarState) {
  // 6 blocks of 16 tokens for 18 sequences of up to ~60 tokens each: sequences are preempted and recomputed
  // mid-output, and must resume the grammar where they were.
  const nlohmann::json schema = nlohmann::json::parse(R"({"type": "object", "properties": {
      "a": {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 999}, "minItems": 3,
            "maxItems": 6}, "b": {"enum": ["left", "right"]}}, "required": ["a", "b"],
      "additionalProperties": false})");
  Generated generated = generate(GrammarKind::kJsonSchema, schema.dump(), 12);
  expect_no_failures(generated);
  testing::expect_valid_with_ajv({{"preempted", schema, generated.texts}}, "engine_structured_preempt");
}

TEST(StructuredOutput, JsonAfterReasoningValidatesAndSurvivesPreemption) {
  // The grammar waits for </think>: before it the output is free (its tokens are garbage a JSON grammar would not
  // allow), after it the JSON validates and ends with EOS. 24 blocks of 16 tokens for 18 sequences: some are
  // preempted and recomputed mid-reasoning or mid-JSON, and must keep both where they were. The schema has no free
  // strings, which the biased </think> would fill; greedy rows end their reasoning at once, sampled ones later.
  const nlohmann::json schema = nlohmann::json::parse(R"({"type": "object", "properties": {
      "a": {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 999}, "minItems": 3,
            "maxItems": 6}, "b": {"enum": ["left", "right"]}, "c": {"type": "boolean"}}, "required": ["a", "b", "c"],
      "additionalProperties": false})");
  const Fixture& f = qwen3_chat();
  const std::vector<int32_t> think_end = f.tokenizer->encode("</think>", false);
  ASSERT_EQ(think_end.size(), 1u);
  Generated generated =
      generate(GrammarKind::kJsonSchema, schema.dump(), 24, AfterReasoning{think_end[0], 10.0f});
  expect_no_failures(generated);
  const size_t num_reasoned = static_cast<size_t>(
      std::count_if(generated.reasoning_lens.begin(), generated.reasoning_lens.end(), [](size_t len) { return len > 0; }));
  EXPECT_GE(num_reasoned, 3u) << "the bias leaves too little reasoning to test";
  testing::expect_valid_with_ajv({{"after_reasoning", schema, generated.texts}}, "engine_structured_after_reasoning");
}

TEST(StructuredOutput, UnconstrainedRowsShareTheBatchUnchanged) {
  // A constrained request next to greedy ones: the greedy ones produce what they produce alone.
  const Fixture& f = qwen3_chat();
  const auto prompt = f.tokenizer->encode("Some prompt text", false);
  const auto run = [&](bool with_constrained) {
    EngineCore core(*f.model, *f.backend, config(256));
    GenerateRequest plain;
    plain.prompt_token_ids = prompt;
    plain.sampling.temperature = 0.0f;
    plain.stop.max_tokens = 12;
    plain.stop.ignore_eos = true;
    core.add_request(1, plain);
    if (with_constrained) {
      GenerateRequest constrained = plain;
      constrained.stop.ignore_eos = false;
      constrained.sampling.constraint = grammar::CompiledGrammar::compile(GrammarKind::kRegex, "[a-z]{20}", f.vocabulary);
      core.add_request(2, constrained);
    }
    std::map<uint64_t, std::vector<int32_t>> tokens;
    while (core.has_unfinished_requests()) {
      for (const auto& out : core.step()) {
        tokens[out.request_id].insert(tokens[out.request_id].end(), out.token_ids.begin(), out.token_ids.end());
      }
    }
    return tokens;
  };
  const auto alone = run(false);
  const auto mixed = run(true);
  EXPECT_EQ(mixed.at(1), alone.at(1));
  const std::string constrained_text = f.tokenizer->decode(mixed.at(2), /*skip_special_tokens=*/true);
  EXPECT_LE(constrained_text.size(), 20u);
  for (char c : constrained_text) EXPECT_TRUE(c >= 'a' && c <= 'z') << constrained_text;
}

}  // namespace
}  // namespace tern
