// The <think> reasoning parsers (qwen3, deepseek_r1, deepseek_v3), on outputs as vLLM's reasoning-parser tests
// feed them.
#include <gtest/gtest.h>

#include "output_parser_checks.h"

namespace tern::chat {
namespace {

using parser_checks::expect_parsed;
using parser_checks::expect_prefixes_parse;
using parser_checks::parser_options;

TEST(DeepSeekR1ReasoningTest, ReasoningStartsWithOrWithoutThinkTag) {
  expect_parsed("<think>This is a reasoning section</think>This is the rest", parser_options("", "deepseek_r1"),
                {"This is a reasoning section", "This is the rest", {}});
  expect_parsed("This is a reasoning section</think>This is the rest", parser_options("", "deepseek_r1"),
                {"This is a reasoning section", "This is the rest", {}});
  expect_parsed("Only reasoning, no end", parser_options("", "deepseek_r1"), {"Only reasoning, no end", "", {}});
  expect_parsed("<think>\nr\n</think>\n\nanswer", parser_options("", "deepseek_r1"), {"r", "answer", {}});
  expect_parsed("<thin", parser_options("", "deepseek_r1"), {"<thin", "", {}});
  expect_prefixes_parse("<think>a</think>b", parser_options("", "deepseek_r1"));
}

TEST(DeepSeekV3ReasoningTest, FollowsTheThinkingSwitchOfThePrompt) {
  expect_parsed("r</think>c", parser_options("", "deepseek_v3", /*prompt_opens_think=*/true), {"r", "c", {}});
  expect_parsed("no thinking", parser_options("", "deepseek_v3", false), {"", "no thinking", {}});
}

TEST(Qwen3ReasoningTest, ThinkBlockInTheOutputOrOpenedByThePrompt) {
  expect_parsed("<think>\nabc\n</think>\n\nHi", parser_options("", "qwen3"), {"abc", "Hi", {}});
  expect_parsed("abc\n</think>\n\nHi", parser_options("", "qwen3", true), {"abc", "Hi", {}});
  expect_parsed("Hi", parser_options("", "qwen3"), {"", "Hi", {}});
}

}  // namespace
}  // namespace tern::chat
