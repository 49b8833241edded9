// Kimi K2 tool calls and reasoning, on outputs as Kimi's chat template writes them back (and vLLM's kimi_k2 tests
// feed them).
#include <gtest/gtest.h>

#include "output_parser_checks.h"

namespace tern::chat {
namespace {

using parser_checks::expect_parsed;
using parser_checks::expect_prefixes_parse;
using parser_checks::parser_options;

TEST(KimiK2ToolCallTest, ParsesASectionOfCalls) {
  expect_parsed(
      "I'll check.<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
      "<|tool_call_argument_begin|>{\"city\": \"Beijing\"}<|tool_call_end|><|tool_call_begin|>functions.get_time:1"
      "<|tool_call_argument_begin|>{}<|tool_call_end|><|tool_calls_section_end|>",
      parser_options("kimi_k2"), {"", "I'll check.", {{"get_weather", R"({"city": "Beijing"})"}, {"get_time", "{}"}}});
}

TEST(KimiK2ToolCallTest, MalformedCallsStayContent) {
  const std::string no_arguments =
      "<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0<|tool_call_end|><|tool_calls_section_end|>";
  expect_parsed(no_arguments, parser_options("kimi_k2"), {"", no_arguments, {}});
  const std::string bad_json =
      "<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>{x}<|tool_call_end|>";
  expect_parsed(bad_json, parser_options("kimi_k2"), {"", bad_json, {}});
  expect_prefixes_parse(
      "a<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>{\"b\": 2}"
      "<|tool_call_end|><|tool_calls_section_end|>",
      parser_options("kimi_k2"));
}

TEST(KimiK2ReasoningTest, ThinkingStartsAtOnceAndEndsAtThinkOrToolSection) {
  expect_parsed("<think>Let me see.</think>Answer.", parser_options("kimi_k2", "kimi_k2"),
                {"Let me see.", "Answer.", {}});
  expect_parsed("No start tag.</think>Answer.", parser_options("kimi_k2", "kimi_k2"), {"No start tag.", "Answer.", {}});
  // A tool-call section ends reasoning without </think> and is read as calls.
  expect_parsed(
      "Need a tool.<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>{}"
      "<|tool_call_end|><|tool_calls_section_end|>",
      parser_options("kimi_k2", "kimi_k2"), {"Need a tool.", "", {{"f", "{}"}}});
  expect_parsed("still thinking", parser_options("kimi_k2", "kimi_k2"), {"still thinking", "", {}});
}

}  // namespace
}  // namespace tern::chat
