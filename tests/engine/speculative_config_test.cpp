// vLLM's --speculative-config JSON: what tern reads and the errors that name what is wrong.
#include "engine/speculative_config.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace tern {
namespace {

TEST(SpeculativeConfig, ReadsNgramAndDraftModelObjects) {
  const auto ngram = parse_speculative_config(
      R"({"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4, "prompt_lookup_min": 2})");
  EXPECT_EQ(ngram.method, SpeculativeMethod::kNgram);
  EXPECT_EQ(ngram.num_speculative_tokens, 3);
  EXPECT_EQ(ngram.prompt_lookup_min, 2);
  EXPECT_EQ(ngram.prompt_lookup_max, 4);
  const auto draft = parse_speculative_config(R"({"model": "/models/draft", "num_speculative_tokens": 4})");
  EXPECT_EQ(draft.method, SpeculativeMethod::kDraftModel);
  EXPECT_EQ(draft.draft_model_dir, "/models/draft");
  EXPECT_EQ(draft.num_speculative_tokens, 4);
}

TEST(SpeculativeConfig, ReadsDeepseekMtpUnderBothOfVllmsNames) {
  for (const char* json : {R"({"method": "deepseek_mtp", "num_speculative_tokens": 1})",
                           R"({"method": "mtp", "num_speculative_tokens": 2})"}) {
    const auto mtp = parse_speculative_config(json);
    EXPECT_EQ(mtp.method, SpeculativeMethod::kDeepseekMtp) << json;
    EXPECT_TRUE(mtp.draft_model_dir.empty()) << json;  // the target's checkpoint, filled in by the commands
    EXPECT_EQ(speculative_method_name(mtp.method), "deepseek_mtp");
  }
  const auto elsewhere =
      parse_speculative_config(R"({"method": "deepseek_mtp", "model": "/models/v3", "num_speculative_tokens": 3})");
  EXPECT_EQ(elsewhere.draft_model_dir, "/models/v3");
  EXPECT_EQ(elsewhere.num_speculative_tokens, 3);
}

TEST(SpeculativeConfig, ReadsEagle3WithItsHead) {
  const auto eagle3 =
      parse_speculative_config(R"({"method": "eagle3", "model": "/heads/eagle3-llama", "num_speculative_tokens": 5})");
  EXPECT_EQ(eagle3.method, SpeculativeMethod::kEagle3);
  EXPECT_EQ(eagle3.draft_model_dir, "/heads/eagle3-llama");
  EXPECT_EQ(eagle3.num_speculative_tokens, 5);
  EXPECT_EQ(speculative_method_name(eagle3.method), "eagle3");
}

// vLLM's "quantization": a drafter quantized as it loads; given or not, a multi-token prediction layer (part of the
// target's checkpoint) otherwise loads as the target does, a draft model or a head as stored.
TEST(SpeculativeConfig, QuantizationIsTheDrafters) {
  const auto fp8 = parse_speculative_config(
      R"({"model": "/models/draft", "num_speculative_tokens": 4, "quantization": "fp8"})");
  EXPECT_EQ(fp8.quantization, OnlineQuantization::fp8);
  EXPECT_EQ(drafter_quantization(fp8, OnlineQuantization::none), OnlineQuantization::fp8);
  const auto unset = parse_speculative_config(R"({"model": "/models/draft", "num_speculative_tokens": 4, "quantization": null})");
  EXPECT_FALSE(unset.quantization);
  EXPECT_EQ(drafter_quantization(unset, OnlineQuantization::fp8), OnlineQuantization::none);
  const auto mtp = parse_speculative_config(R"({"method": "mtp", "num_speculative_tokens": 1})");
  EXPECT_EQ(drafter_quantization(mtp, OnlineQuantization::fp8), OnlineQuantization::fp8);
  EXPECT_EQ(drafter_quantization(mtp, OnlineQuantization::none), OnlineQuantization::none);
  const auto mtp_as_stored =
      parse_speculative_config(R"({"method": "mtp", "num_speculative_tokens": 1, "quantization": "none"})");
  EXPECT_EQ(drafter_quantization(mtp_as_stored, OnlineQuantization::fp8), OnlineQuantization::none);
  const auto eagle3 = parse_speculative_config(R"({"method": "eagle3", "model": "/h", "num_speculative_tokens": 3})");
  EXPECT_EQ(drafter_quantization(eagle3, OnlineQuantization::fp8), OnlineQuantization::none);
}

TEST(SpeculativeConfig, LookupBoundsDefaultAsVllms) {
  const auto only_max = parse_speculative_config(R"({"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_max": 3})");
  EXPECT_EQ(only_max.prompt_lookup_min, 3);
  const auto only_min = parse_speculative_config(R"({"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 2})");
  EXPECT_EQ(only_min.prompt_lookup_max, 2);
  const auto neither = parse_speculative_config(R"({"method": "ngram", "num_speculative_tokens": 2})");
  EXPECT_EQ(neither.prompt_lookup_min, 5);
  EXPECT_EQ(neither.prompt_lookup_max, 5);
}

void expect_error_naming(const char* json, const std::string& what) {
  try {
    parse_speculative_config(json);
    ADD_FAILURE() << json << " was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
  }
}

TEST(SpeculativeConfig, BadObjectsAreRefusedNamingTheProblem) {
  expect_error_naming("{not json", "not a JSON object");
  expect_error_naming("[1]", "not a JSON object");
  expect_error_naming(R"({"method": "ngram", "num_speculative_tokens": 3, "lookahead": 2})", "unknown key 'lookahead'");
  expect_error_naming(R"({"method": "ngram", "num_speculative_tokens": 0})", "num_speculative_tokens");
  expect_error_naming(R"({"method": "ngram", "num_speculative_tokens": 99})", "num_speculative_tokens");
  expect_error_naming(R"({"method": "ngram", "num_speculative_tokens": "3"})", "num_speculative_tokens");
  expect_error_naming(R"({"method": "ngram"})", "num_speculative_tokens is required");
  expect_error_naming(R"({"method": "eagle3", "num_speculative_tokens": 3})", "method eagle3 needs \"model\"");
  expect_error_naming(R"({"method": "eagle", "model": "/heads/e", "num_speculative_tokens": 3})",
                      "unknown method 'eagle'");
  expect_error_naming(R"({"method": "draft_model", "num_speculative_tokens": 3})", "needs \"model\"");
  expect_error_naming(R"({"num_speculative_tokens": 3})", "give a method");
  expect_error_naming(R"({"model": "/d", "num_speculative_tokens": 3, "quantization": "awq"})", "quantization 'awq'");
  expect_error_naming(R"({"model": "/d", "num_speculative_tokens": 3, "quantization": 8})",
                      "quantization must be a string");
  expect_error_naming(R"({"method": "ngram", "num_speculative_tokens": 3, "quantization": "fp8"})",
                      "ngram has no weights to quantize");
  expect_error_naming(R"({"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 4, "prompt_lookup_max": 2})",
                      "prompt_lookup_min 4 is more than prompt_lookup_max 2");
}

}  // namespace
}  // namespace tern
