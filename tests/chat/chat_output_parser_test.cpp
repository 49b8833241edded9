// Reasoning and tool-call parsing: every output is parsed whole, streamed one byte at a time and streamed in random
// chunks, and all three must give the expected message.
#include <gtest/gtest.h>

#include <random>

#include "chat/chat_output_parser.h"
#include "chat/chat_template.h"
#include "chat/tool_call_parser.h"
#include "fixtures.h"

namespace tern::chat {
namespace {

ChatOutputOptions qwen3_options(bool starts_in_reasoning = false) {
  ChatOutputOptions options;
  options.parse_reasoning = true;
  options.starts_in_reasoning = starts_in_reasoning;
  options.tool_call_format = ToolCallFormat::kHermes;
  options.tool_call_id_prefix = "t";
  return options;
}

ChatOutputOptions llama3_options() {
  ChatOutputOptions options;
  options.tool_call_format = ToolCallFormat::kLlama3Json;
  options.tool_call_id_prefix = "t";
  return options;
}

ChatMessage parse_in_chunks(std::string_view text, const ChatOutputOptions& options, std::vector<size_t> cuts) {
  ChatOutputParser parser(options);
  ChatMessage message;
  size_t pos = 0;
  for (size_t cut : cuts) {
    message.append(parser.feed(text.substr(pos, cut - pos)));
    pos = cut;
  }
  message.append(parser.feed(text.substr(pos)));
  message.append(parser.flush());
  return message;
}

struct Expected {
  std::string reasoning;
  std::string content;
  std::vector<std::pair<std::string, std::string>> calls;  // name, arguments
};

void expect_message(const ChatMessage& message, const Expected& expected, const std::string& how) {
  SCOPED_TRACE(how);
  EXPECT_EQ(message.reasoning_content, expected.reasoning);
  EXPECT_EQ(message.content, expected.content);
  ASSERT_EQ(message.tool_calls.size(), expected.calls.size());
  for (size_t i = 0; i < expected.calls.size(); ++i) {
    EXPECT_EQ(message.tool_calls[i].id, "call_t" + std::to_string(i));
    EXPECT_EQ(message.tool_calls[i].name, expected.calls[i].first);
    EXPECT_EQ(message.tool_calls[i].arguments, expected.calls[i].second);
  }
}

// Whole, byte by byte, and in random chunks: all must give `expected`.
void expect_parsed(std::string_view text, const ChatOutputOptions& options, const Expected& expected) {
  SCOPED_TRACE(std::string(text));
  expect_message(ChatOutputParser::parse(text, options), expected, "whole");
  std::vector<size_t> every_byte;
  for (size_t i = 1; i < text.size(); ++i) every_byte.push_back(i);
  expect_message(parse_in_chunks(text, options, every_byte), expected, "byte by byte");
  std::mt19937 rng(1234);
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<size_t> cuts;
    for (size_t pos = 0;;) {
      pos += 1 + rng() % 7;
      if (pos >= text.size()) break;
      cuts.push_back(pos);
    }
    expect_message(parse_in_chunks(text, options, cuts), expected, "random chunks, trial " + std::to_string(trial));
  }
}

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
  ReasoningParser parser(false);
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
  EXPECT_TRUE(ReasoningParser::prompt_opens_reasoning("<|im_start|>assistant\n<think>\n"));
  EXPECT_FALSE(ReasoningParser::prompt_opens_reasoning("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
  EXPECT_FALSE(ReasoningParser::prompt_opens_reasoning("<|im_start|>assistant\n"));
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
  ChatOutputOptions options = ChatOutputOptions::for_template(qwen3.source(), "<|im_start|>assistant\n");
  EXPECT_TRUE(options.parse_reasoning);
  EXPECT_FALSE(options.starts_in_reasoning);
  EXPECT_EQ(options.tool_call_format, ToolCallFormat::kHermes);
  EXPECT_TRUE(ChatOutputOptions::for_template(qwen3.source(), "<|im_start|>assistant\n<think>\n").starts_in_reasoning);

  ChatTemplate llama3 = ChatTemplate::from_tokenizer_dir(testing::fixtures_dir() / "tokenizers/llama3");
  ChatOutputOptions llama_options = ChatOutputOptions::for_template(llama3.source(), "");
  EXPECT_FALSE(llama_options.parse_reasoning);
  EXPECT_EQ(llama_options.tool_call_format, ToolCallFormat::kNone);  // this Llama 3 template has no tool format
}

TEST(ChatOutputParserTest, RandomIdPrefixesDifferBetweenParsers) {
  ChatOutputOptions options;
  options.tool_call_format = ToolCallFormat::kHermes;
  std::string text = "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>";
  std::string first = ChatOutputParser::parse(text, options).tool_calls.at(0).id;
  std::string second = ChatOutputParser::parse(text, options).tool_calls.at(0).id;
  EXPECT_EQ(first.rfind("call_", 0), 0u);
  EXPECT_NE(first, second);
}

}  // namespace
}  // namespace tern::chat
