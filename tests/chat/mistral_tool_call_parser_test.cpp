// Mistral tool calls in both tokenizer generations' syntax (as vLLM's mistral tool-parser tests feed them).
#include <gtest/gtest.h>

#include "output_parser_checks.h"

namespace tern::chat {
namespace {

using parser_checks::expect_parsed;
using parser_checks::expect_prefixes_parse;
using parser_checks::parser_options;

TEST(MistralToolCallTest, ParsesTheJsonListForm) {
  expect_parsed(
      "[TOOL_CALLS] [{\"name\": \"get_current_weather\", \"arguments\": {\"city\": \"Dallas\", \"state\": \"TX\"}}, "
      "{\"name\": \"add\", \"arguments\": {\"a\": 3.5, \"b\": 4}}]",
      parser_options("mistral"),
      {"", "", {{"get_current_weather", R"({"city": "Dallas", "state": "TX"})"}, {"add", R"({"a": 3.5, "b": 4})"}}});
}

TEST(MistralToolCallTest, ParsesTheNameArgsForm) {
  expect_parsed(
      "Let me check.[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}[TOOL_CALLS]get_time[CALL_ID]abc123def"
      "[ARGS]{}",
      parser_options("mistral"), {"", "Let me check.", {{"get_weather", R"({"city": "Paris"})"}, {"get_time", "{}"}}});
}

TEST(MistralToolCallTest, MalformedCallsStayContent) {
  const std::string bad = "[TOOL_CALLS] [{\"name\": \"f\", \"arguments\": ";
  expect_parsed(bad, parser_options("mistral"), {"", bad, {}});
  const std::string no_args = "[TOOL_CALLS]get_weather{\"city\": \"Paris\"}";
  expect_parsed(no_args, parser_options("mistral"), {"", no_args, {}});
  expect_parsed("Plain [TOOL_CALL", parser_options("mistral"), {"", "Plain [TOOL_CALL", {}});
  expect_prefixes_parse("[TOOL_CALLS]f[ARGS]{\"a\": \"[TOOL_CALLS]\"}", parser_options("mistral"));
}

}  // namespace
}  // namespace tern::chat
