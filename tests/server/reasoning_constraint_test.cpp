// Where a chat output's JSON constraint starts, against vLLM's rule (is_reasoning_end on the prompt, then on the
// output): after the format's end-of-reasoning marker unless the prompt closed the reasoning, from the first token
// without a reasoning parser. The markers are the Qwen3 tokenizer's ids of the format's text.
#include "server/reasoning_constraint.h"

#include <gtest/gtest.h>

#include "fixtures.h"

namespace tern::server {
namespace {

const Tokenizer& qwen3_tokenizer() {
  static const Tokenizer tokenizer = Tokenizer::load(testing::fixtures_dir() / "tokenizers" / "qwen3");
  return tokenizer;
}

std::optional<ReasoningEndMarker> marker_for(const std::string& reasoning_parser, std::string_view prompt) {
  chat::ChatOutputOptions options;
  options.reasoning_parser = reasoning_parser;
  return constraint_start_after_reasoning(options, prompt, qwen3_tokenizer());
}

constexpr int32_t kQwen3ThinkEnd = 151668;  // </think>, one added token

TEST(ReasoningConstraintTest, ThinkBlockFormatsWaitForTheEndTagUnlessThePromptClosedIt) {
  const std::string thinking_on = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n";
  const std::string thinking_off = thinking_on + "<think>\n\n</think>\n\n";
  const std::string opened = thinking_on + "<think>\n";
  // An earlier turn's closed block does not close the block this prompt opens.
  const std::string reopened = "<think>a</think>b<|im_end|>\n<|im_start|>assistant\n<think>\n";
  for (const std::string parser : {"qwen3", "deepseek_r1", "deepseek_v3", "kimi_k2"}) {
    for (const std::string& prompt : {thinking_on, opened, reopened}) {
      const auto marker = marker_for(parser, prompt);
      ASSERT_TRUE(marker) << parser << " " << prompt;
      EXPECT_EQ(marker->prefix, std::vector<int32_t>{kQwen3ThinkEnd});
      EXPECT_TRUE(marker->suffix.empty());
    }
    EXPECT_FALSE(marker_for(parser, thinking_off)) << parser;
  }
}

TEST(ReasoningConstraintTest, HarmonyWaitsForTheFinalChannelsMessage) {
  const auto marker = marker_for("gpt_oss", "<|start|>user<|message|>hi<|end|><|start|>assistant");
  ASSERT_TRUE(marker);
  EXPECT_EQ(marker->prefix, qwen3_tokenizer().encode("<|channel|>final", false));
  EXPECT_EQ(marker->suffix, qwen3_tokenizer().encode("<|message|>", false));
  EXPECT_EQ(marker->max_tokens_between, 20);
}

TEST(ReasoningConstraintTest, NoReasoningParserAppliesFromTheFirstToken) {
  EXPECT_FALSE(marker_for("", "<|im_start|>assistant\n<think>\n"));
}

}  // namespace
}  // namespace tern::server
