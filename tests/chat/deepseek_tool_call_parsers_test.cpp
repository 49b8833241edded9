// DeepSeek-V3 / R1 and V3.1 tool calls, with outputs as DeepSeek's chat templates write them back (and as vLLM's
// deepseekv3 / deepseekv31 tool-parser tests feed them).
#include <gtest/gtest.h>

#include "output_parser_checks.h"

namespace tern::chat {
namespace {

using parser_checks::expect_parsed;
using parser_checks::expect_prefixes_parse;
using parser_checks::parser_options;

TEST(DeepSeekV3ToolCallTest, ParsesFencedCallsAfterContent) {
  expect_parsed(
      "Let me look.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n"
      "{\"city\": \"Paris\"}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_time\n```json\n"
      "{\"zone\":\"CET\",\"exact\":true}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
      parser_options("deepseek_v3"),
      {"",
       "Let me look.",
       {{"get_weather", R"({"city": "Paris"})"}, {"get_time", R"({"zone": "CET", "exact": true})"}}});
}

TEST(DeepSeekV3ToolCallTest, R1ReasoningThenACall) {
  // R1 starts reasoning without <think>; the call follows </think>.
  expect_parsed(
      "The user wants weather.\n</think>\n\n<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>"
      "get_weather\n```json\n{\"city\": \"Rome\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
      parser_options("deepseek_v3", "deepseek_r1"),
      {"The user wants weather.", "", {{"get_weather", R"({"city": "Rome"})"}}});
}

TEST(DeepSeekV3ToolCallTest, OutputEndingBeforeTheSectionEndStillCalls) {
  expect_parsed(
      "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{}\n```<｜tool▁call▁end｜>",
      parser_options("deepseek_v3"), {"", "", {{"f", "{}"}}});
}

TEST(DeepSeekV3ToolCallTest, MalformedCallsStayContent) {
  const std::string bad_json =
      "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{\"a\": \n```<｜tool▁call▁end｜>"
      "<｜tool▁calls▁end｜>";
  expect_parsed(bad_json, parser_options("deepseek_v3"), {"", bad_json, {}});
  const std::string no_type = "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>{}<｜tool▁call▁end｜><｜tool▁calls▁end｜>";
  expect_parsed(no_type, parser_options("deepseek_v3"), {"", no_type, {}});
  expect_parsed("text <｜tool▁calls", parser_options("deepseek_v3"), {"", "text <｜tool▁calls", {}});
  expect_prefixes_parse(
      "ok<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{\"a\": [1, 2]}\n```"
      "<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
      parser_options("deepseek_v3"));
}

TEST(DeepSeekV31ToolCallTest, ParsesNameSeparatorArguments) {
  expect_parsed(
      "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": \"Oslo\"}<｜tool▁call▁end｜>"
      "<｜tool▁call▁begin｜>add<｜tool▁sep｜>{\"a\": 1, \"b\": [2, {\"c\": null}]}<｜tool▁call▁end｜><｜tool▁calls▁end｜>"
      " done",
      parser_options("deepseek_v31"),
      {"", "done", {{"get_weather", R"({"city": "Oslo"})"}, {"add", R"({"a": 1, "b": [2, {"c": null}]})"}}});
}

TEST(DeepSeekV31ToolCallTest, ThinkingOnThenCall) {
  expect_parsed(
      "plan</think>Sure.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>{\"x\": \"y\"}<｜tool▁call▁end｜>"
      "<｜tool▁calls▁end｜>",
      parser_options("deepseek_v31", "deepseek_v3", /*prompt_opens_think=*/true),
      {"plan", "Sure.", {{"f", R"({"x": "y"})"}}});
  // Thinking off: the template closed </think> in the prompt, so all of the output is content.
  expect_parsed("Hello", parser_options("deepseek_v31", "deepseek_v3", false), {"", "Hello", {}});
}

TEST(DeepSeekV31ToolCallTest, MalformedCallsStayContent) {
  const std::string array_arguments =
      "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>[1]<｜tool▁call▁end｜><｜tool▁calls▁end｜>";
  expect_parsed(array_arguments, parser_options("deepseek_v31"), {"", array_arguments, {}});
  const std::string unterminated = "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>{\"a\": 1";
  expect_parsed(unterminated, parser_options("deepseek_v31"), {"", unterminated, {}});
  expect_prefixes_parse(
      "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>{\"a\": \"<｜tool▁call▁end｜>\"}<｜tool▁call▁end｜>",
      parser_options("deepseek_v31"));
}

}  // namespace
}  // namespace tern::chat
