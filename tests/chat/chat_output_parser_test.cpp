// Reasoning and tool-call parsing: every output is parsed whole, streamed one byte at a time and streamed in random
// chunks, and all three must give the expected message.
#include <gtest/gtest.h>

#include "chat/chat_output_parser.h"
#include "chat/chat_template.h"
#include "chat/output_parser_registry.h"
#include "core/error.h"
#include "fixtures.h"
#include "output_parser_checks.h"

namespace tern::chat {
namespace {

using parser_checks::Expected;
using parser_checks::expect_parsed;
using parser_checks::parse_in_chunks;

ChatOutputOptions qwen3_options(bool starts_in_reasoning = false) {
  return parser_checks::parser_options("hermes", "qwen3", starts_in_reasoning);
}

ChatOutputOptions llama3_options() { return parser_checks::parser_options("llama3_json"); }

TEST(ReasoningParserTest, SplitsThinkBlockFromContent) {
  expect_parsed("<think>\nLet me add.\n2+2=4\n</think>\n\nThe answer is 4.", qwen3_options(),
                {"Let me add.\n2+2=4", "The answer is 4.", {}});
}

TEST(ReasoningParserTest, OutputMayStartInsideReasoningOpenedByThePrompt) {
  expect_parsed("Reasoning here.\n</think>\n\nDone.", qwen3_options(true), {"Reasoning here.", "Done.", {}});
  expect_parsed("\n\n</think>\n\nDone.", qwen3_options(true), {"", "Done.", {}});
}

TEST(ReasoningParserTest, WithoutTagsEverythingIsContent) {
  expect_parsed("Just an answer with a < sign and <thought>.", qwen3_options(), {"", "Just an answer with a < sign and <thought>.", {}});
}

TEST(ReasoningParserTest, UnclosedReasoningStaysReasoning) {
  expect_parsed("<think>\nstill thinking about </thi", qwen3_options(), {"still thinking about </thi", "", {}});
}

TEST(ReasoningParserTest, PartialTagsAreHeldBack) {
  ThinkTagReasoningParser parser(false);
  ReasoningDelta first = parser.feed("<thi");
  EXPECT_EQ(first.content, "");
  EXPECT_EQ(first.reasoning, "");
  ReasoningDelta second = parser.feed("nk>\nabc\n</th");
  EXPECT_EQ(second.reasoning, "abc");
  EXPECT_EQ(second.content, "");
  ReasoningDelta third = parser.feed("ink>\n\nHi");
  EXPECT_EQ(third.reasoning, "");
  EXPECT_EQ(third.content, "Hi");
}

TEST(ReasoningParserTest, DetectsPromptsThatOpenReasoning) {
  EXPECT_TRUE(ThinkTagReasoningParser::prompt_opens_reasoning("<|im_start|>assistant\n<think>\n"));
  EXPECT_FALSE(ThinkTagReasoningParser::prompt_opens_reasoning("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
  EXPECT_FALSE(ThinkTagReasoningParser::prompt_opens_reasoning("<|im_start|>assistant\n"));
}

TEST(HermesToolCallTest, ParsesSeveralCallsAfterContent) {
  expect_parsed(
      "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n"
      "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"zone\": \"CET\", \"hours\": [1, 2.5]}}\n</tool_call>",
      qwen3_options(),
      {"", "Let me check.\n", {{"get_weather", R"({"city": "Paris"})"}, {"get_time", R"({"zone": "CET", "hours": [1, 2.5]})"}}});
}

TEST(HermesToolCallTest, ReasoningThenToolCall) {
  expect_parsed(
      "<think>\nI need the weather.\n</think>\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
      "{\"city\": \"Zürich\"}}\n</tool_call>",
      qwen3_options(), {"I need the weather.", "", {{"get_weather", R"({"city": "Zürich"})"}}});
}

TEST(HermesToolCallTest, MalformedCallsStayContent) {
  expect_parsed("<tool_call>\n{\"name\": \"f\", \"arguments\": {oops}\n</tool_call>", qwen3_options(),
                {"", "<tool_call>\n{\"name\": \"f\", \"arguments\": {oops}\n</tool_call>", {}});
  expect_parsed("<tool_call>\n{\"arguments\": {}}\n</tool_call> after", qwen3_options(),
                {"", "<tool_call>\n{\"arguments\": {}}\n</tool_call> after", {}});
  expect_parsed("Text then <tool_call>\n{\"name\": \"f\", \"argu", qwen3_options(),
                {"", "Text then <tool_call>\n{\"name\": \"f\", \"argu", {}});
}

TEST(HermesToolCallTest, UnclosedButCompleteCallAtTheEndIsACall) {
  expect_parsed("<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1}}\n", qwen3_options(),
                {"", "", {{"f", R"({"x": 1})"}}});
}

TEST(HermesToolCallTest, ArgumentsGivenAsJsonText) {
  expect_parsed("<tool_call>\n{\"name\": \"f\", \"arguments\": \"{\\\"x\\\":1}\"}\n</tool_call>", qwen3_options(),
                {"", "", {{"f", R"({"x": 1})"}}});
}

TEST(HermesToolCallTest, PartialTagIsNeverLeakedIntoContent) {
  ChatOutputParser parser(qwen3_options());
  EXPECT_EQ(parser.feed("Hello <tool_").content, "Hello ");
  ChatDelta inside = parser.feed("call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_c");
  EXPECT_EQ(inside.content, "");
  EXPECT_TRUE(inside.tool_calls.empty());
  ChatDelta closed = parser.feed("all>");
  ASSERT_EQ(closed.tool_calls.size(), 1u);
  EXPECT_EQ(closed.tool_calls[0].index, 0);
  EXPECT_EQ(closed.tool_calls[0].id, "call_t0");
  EXPECT_EQ(closed.tool_calls[0].name, "f");
  EXPECT_EQ(closed.tool_calls[0].arguments, "{}");
  EXPECT_TRUE(parser.flush().empty());

  ChatOutputParser not_a_tag(qwen3_options());
  EXPECT_EQ(not_a_tag.feed("a <tool").content, "a ");
  EXPECT_EQ(not_a_tag.feed("s> b").content, "<tools> b");
  EXPECT_EQ(not_a_tag.feed(" <").content, " ");
  EXPECT_EQ(not_a_tag.flush().content, "<");
}

TEST(HermesToolCallTest, ReadsTheCallsQwen3TemplateWrites) {
  // The Qwen3 golden renders an assistant tool call into the prompt; parsing it back gives the original call.
  auto goldens = testing::read_json(testing::fixtures_dir() / "tokenizers/qwen3/chat_golden.json");
  const auto& roundtrip = goldens["tool_call_roundtrip"];
  std::string rendered = roundtrip["rendered"].get<std::string>();
  std::string marker = "<|im_start|>assistant\n";
  size_t begin = rendered.find(marker) + marker.size();
  std::string assistant_text = rendered.substr(begin, rendered.find("<|im_end|>", begin) - begin);
  const auto& call = roundtrip["messages"][1]["tool_calls"][0]["function"];
  expect_parsed(assistant_text, qwen3_options(),
                {"", "", {{call["name"].get<std::string>(), Value::from_json(call["arguments"]).to_json_text()}}});
}

TEST(Llama3ToolCallTest, ParsesJsonCallsWithAndWithoutPythonTag) {
  expect_parsed("<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}", llama3_options(),
                {"", "", {{"get_weather", R"({"city": "Paris"})"}}});
  expect_parsed("{\"name\": \"a\", \"parameters\": {\"s\": \"}{\\\"\"}}; {\"name\": \"b\", \"parameters\": {}}",
                llama3_options(), {"", "", {{"a", R"({"s": "}{\""})"}, {"b", "{}"}}});
}

TEST(Llama3ToolCallTest, OtherOutputIsContent) {
  expect_parsed("The weather is {\"nice\"}.", llama3_options(), {"", "The weather is {\"nice\"}.", {}});
  expect_parsed("{\"answer\": 42}", llama3_options(), {"", "{\"answer\": 42}", {}});
  expect_parsed("{\"name\": \"f\", \"parameters\": {\"x\": ", llama3_options(),
                {"", "{\"name\": \"f\", \"parameters\": {\"x\": ", {}});
  expect_parsed("<|python", llama3_options(), {"", "<|python", {}});
}

TEST(ToolCallJsonTest, ArgumentsNestedPastTheLimitAreNoCall) {
  // As an object and as JSON text in a string (which the outer text's depth does not show); both were converted
  // to a Value, recursing once per level.
  const std::string deep = std::string(27'000, '[') + std::string(27'000, ']');
  ParsedToolCall call;
  EXPECT_FALSE(parse_tool_call_json(R"({"name": "f", "arguments": {"x": )" + deep + "}}", call));
  EXPECT_FALSE(parse_tool_call_json(R"({"name": "f", "arguments": "{\"x\": )" + deep + R"(}"})", call));
  EXPECT_TRUE(parse_tool_call_json(R"({"name": "f", "arguments": "{\"x\": [[1]]}"})", call));
  EXPECT_EQ(call.arguments, R"({"x": [[1]]})");
}

TEST(ChatMessageTest, OpenAiJsonShape) {
  ChatMessage message = ChatOutputParser::parse(
      "<think>\nhm\n</think>\n\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1}}\n</tool_call>",
      qwen3_options());
  EXPECT_EQ(message.to_openai_json().dump(),
            R"({"role":"assistant","content":null,"reasoning_content":"hm","tool_calls":[{"id":"call_t0",)"
            R"("type":"function","function":{"name":"f","arguments":"{\"x\": 1}"}}]})");
  EXPECT_EQ(ChatOutputParser::parse("hi", ChatOutputOptions{}).to_openai_json().dump(),
            R"({"role":"assistant","content":"hi"})");
}

TEST(ChatOutputOptionsTest, DetectsFormatsFromTheTemplate) {
  ChatTemplate qwen3 = ChatTemplate::from_tokenizer_dir(testing::fixtures_dir() / "tokenizers/qwen3");
  ChatOutputOptions options = ChatOutputOptions::for_chat_template(qwen3, "<|im_start|>assistant\n");
  EXPECT_EQ(options.reasoning_parser, "qwen3");
  EXPECT_FALSE(options.prompt_opens_think);
  EXPECT_EQ(options.tool_call_parser, "hermes");
  EXPECT_TRUE(ChatOutputOptions::for_chat_template(qwen3, "<|im_start|>assistant\n<think>\n").prompt_opens_think);

  ChatTemplate llama3 = ChatTemplate::from_tokenizer_dir(testing::fixtures_dir() / "tokenizers/llama3");
  ChatOutputOptions llama_options = ChatOutputOptions::for_chat_template(llama3, "");
  EXPECT_EQ(llama_options.reasoning_parser, "");
  EXPECT_EQ(llama_options.tool_call_parser, "");  // this Llama 3 template has no tool format
}

// The markers each family's template writes pick its parsers, as vLLM's documentation pairs them.
TEST(ChatOutputOptionsTest, PicksTheFamilyDefaultFromTemplateMarkers) {
  struct Case {
    std::string_view marker;
    std::string_view tool_call_parser;
    std::string_view reasoning_parser;
  };
  const Case cases[] = {
      {"<|start|>assistant<|channel|>final<|message|>", "openai", "gpt_oss"},
      {"<｜Assistant｜><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n", "deepseek_v3", ""},
      {"<｜Assistant｜><think><｜tool▁call▁begin｜>f<｜tool▁sep｜>", "deepseek_v31", "deepseek_v3"},
      {"<think><|tool_calls_section_begin|>", "kimi_k2", "kimi_k2"},
      {"<tool_call>{{ name }}<arg_key>k</arg_key>", "glm45", ""},
      {"<tool_call>\n<function=f>\n<parameter=p>", "qwen3_coder", ""},
      {"<think><tool_call>", "hermes", "qwen3"},
      {"[TOOL_CALLS]", "mistral", ""},
      {"<|python_tag|>", "llama3_json", ""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(c.marker));
    ChatOutputOptions options = ChatOutputOptions::for_template_source(c.marker, "");
    EXPECT_EQ(options.tool_call_parser, c.tool_call_parser);
    EXPECT_EQ(options.reasoning_parser, c.reasoning_parser);
  }
}

TEST(ChatOutputOptionsTest, EveryRegisteredParserIsMadeByName) {
  for (const auto& entry : tool_call_parsers()) {
    EXPECT_EQ(find_tool_call_parser(entry.name), &entry);
    EXPECT_NE(entry.make({}), nullptr);
    EXPECT_NE(tool_call_parser_names().find(entry.name), std::string::npos);
  }
  for (const auto& entry : reasoning_parsers()) {
    EXPECT_EQ(find_reasoning_parser(entry.name), &entry);
    EXPECT_NE(entry.make(false), nullptr);
  }
  EXPECT_EQ(find_tool_call_parser("hermes2"), nullptr);
  EXPECT_THROW(ChatOutputParser(parser_checks::parser_options("no_such_parser")), Error);
  EXPECT_THROW(ChatOutputParser(parser_checks::parser_options("hermes", "no_such_parser")), Error);
}

TEST(ChatOutputOptionsTest, HarmonyNeedsSpecialTokensKept) {
  EXPECT_TRUE(parser_checks::parser_options("", "gpt_oss").keeps_special_tokens());
  EXPECT_TRUE(parser_checks::parser_options("openai").keeps_special_tokens());
  EXPECT_FALSE(parser_checks::parser_options("hermes", "qwen3").keeps_special_tokens());
}

TEST(ChatOutputParserTest, RandomIdPrefixesDifferBetweenParsers) {
  ChatOutputOptions options;
  options.tool_call_parser = "hermes";
  std::string text = "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>";
  std::string first = ChatOutputParser::parse(text, options).tool_calls.at(0).id;
  std::string second = ChatOutputParser::parse(text, options).tool_calls.at(0).id;
  EXPECT_EQ(first.rfind("call_", 0), 0u);
  EXPECT_NE(first, second);
}

}  // namespace
}  // namespace tern::chat
