// gpt-oss harmony output: the gpt_oss reasoning parser and the openai tool-call parser, on outputs as OpenAI's
// harmony documentation shows them (and vLLM's gpt-oss tests feed them).
#include <gtest/gtest.h>

#include "chat/harmony_reader.h"
#include "output_parser_checks.h"

namespace tern::chat {
namespace {

using parser_checks::expect_parsed;
using parser_checks::expect_prefixes_parse;
using parser_checks::parser_options;

ChatOutputOptions harmony() { return parser_options("openai", "gpt_oss"); }

TEST(HarmonyTest, AnalysisIsReasoningAndFinalIsContent) {
  expect_parsed(
      "<|channel|>analysis<|message|>User asks a simple question.<|end|><|start|>assistant<|channel|>final"
      "<|message|>2 + 2 = 4.<|return|>",
      harmony(), {"User asks a simple question.", "2 + 2 = 4.", {}});
}

TEST(HarmonyTest, EndMarkerStoppedByEosIsNotNeeded) {
  // <|return|> and <|call|> are EOS tokens: the engine stops on them and they never reach the text.
  expect_parsed("<|channel|>analysis<|message|>think<|end|><|start|>assistant<|channel|>final<|message|>Hi", harmony(),
                {"think", "Hi", {}});
}

TEST(HarmonyTest, CommentaryToAFunctionIsACall) {
  expect_parsed(
      "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>commentary "
      "to=functions.get_weather <|constrain|>json<|message|>{\"location\":\"San Francisco\"}<|call|>",
      harmony(), {"Need weather.", "", {{"get_weather", R"({"location": "San Francisco"})"}}});
  // The recipient may stand in the role part of the header.
  expect_parsed(
      "<|channel|>analysis<|message|>x<|end|><|start|>assistant to=functions.f<|channel|>commentary json"
      "<|message|>{\"a\": 1}",
      harmony(), {"x", "", {{"f", R"({"a": 1})"}}});
}

TEST(HarmonyTest, PreambleOnCommentaryIsContentAndSeveralCalls) {
  expect_parsed(
      "<|channel|>commentary<|message|>Checking both.<|end|><|start|>assistant<|channel|>commentary "
      "to=functions.a <|constrain|>json<|message|>{}<|call|><|start|>assistant<|channel|>commentary to=functions.b "
      "<|constrain|>json<|message|>{\"k\": [1]}<|call|>",
      harmony(), {"", "Checking both.", {{"a", "{}"}, {"b", R"({"k": [1]})"}}});
}

TEST(HarmonyTest, WithoutTheToolParserACallStaysAsWritten) {
  // tool_choice "none": only the reasoning parser runs; the call message is handed on untouched.
  const std::string call =
      "<|start|>assistant<|channel|>commentary to=functions.f <|constrain|>json<|message|>{}<|call|>";
  expect_parsed("<|channel|>analysis<|message|>r<|end|>" + call, parser_options("", "gpt_oss"), {"r", call, {}});
}

TEST(HarmonyTest, ToolParserAloneDropsAnalysis) {
  expect_parsed("<|channel|>analysis<|message|>hidden<|end|><|start|>assistant<|channel|>final<|message|>shown",
                parser_options("openai"), {"", "shown", {}});
}

TEST(HarmonyTest, MalformedAndPartialOutputIsContent) {
  // Arguments that are not a JSON object: the call stays content as written.
  const std::string bad = "<|start|>assistant<|channel|>commentary to=functions.f <|constrain|>json<|message|>{\"a\":";
  expect_parsed(bad, harmony(), {"", bad, {}});
  // A header the output ended in.
  expect_parsed("<|channel|>analy", harmony(), {"", "<|channel|>analy", {}});
  // Text outside any message.
  expect_parsed("plain text", harmony(), {"", "plain text", {}});
  expect_prefixes_parse(
      "<|channel|>analysis<|message|>a<|end|><|start|>assistant<|channel|>commentary to=functions.f "
      "<|constrain|>json<|message|>{\"q\": \"<|call|>\"}<|call|>",
      harmony());
}

TEST(HarmonyReaderTest, ReadsHeaders) {
  HarmonyReader reader;
  auto events = reader.feed("<|start|>assistant<|channel|>commentary to=functions.lookup <|constrain|>json<|message|>{}");
  auto rest = reader.flush();
  events.insert(events.end(), rest.begin(), rest.end());
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].kind, HarmonyEvent::Kind::kHeader);
  EXPECT_EQ(events[0].channel, "commentary");
  EXPECT_EQ(events[0].recipient, "functions.lookup");
  EXPECT_EQ(events[1].text, "{}");
  EXPECT_EQ(events[2].kind, HarmonyEvent::Kind::kEnd);
}

}  // namespace
}  // namespace tern::chat
