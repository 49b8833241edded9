// DeepSeek-V3.2 / V4 output parsing: completions parsed by DeepSeek's reference parsers
// (data/deepseek_encoder_goldens.json) must give the same message whole, streamed byte by byte and in random chunks;
// malformed and cut-off calls stay content.
#include "chat/dsml_tool_call_parser.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "chat/chat_output_parser.h"
#include "chat/output_parser_registry.h"
#include "output_parser_checks.h"

namespace tern::chat {
namespace {

using Json = nlohmann::ordered_json;

constexpr std::string_view kEos = "<｜end▁of▁sentence｜>";

ChatOutputOptions deepseek_options(std::string_view version, bool thinking) {
  // The prompt ends in <think> in thinking mode, </think> in chat mode.
  return parser_checks::parser_options(version == "v32" ? "deepseek_v32" : "deepseek_v4", "deepseek_v3", thinking);
}

using parser_checks::parse_in_chunks;

std::vector<ChatMessage> parse_every_way(std::string_view text, const ChatOutputOptions& options, uint32_t seed) {
  std::vector<size_t> every_byte;
  for (size_t i = 1; i < text.size(); ++i) every_byte.push_back(i);
  std::mt19937 rng(seed);
  std::vector<size_t> random_cuts;
  for (size_t pos = 0; pos < text.size();) {
    pos += std::uniform_int_distribution<size_t>(1, 9)(rng);
    if (pos < text.size()) random_cuts.push_back(pos);
  }
  return {parse_in_chunks(text, options, {}), parse_in_chunks(text, options, every_byte),
          parse_in_chunks(text, options, random_cuts)};
}

// tern's <think> parser drops the newlines around the tags, which DeepSeek's reference parser keeps.
std::string without_boundary_newlines(std::string text) {
  text.erase(0, text.find_first_not_of('\n') == std::string::npos ? text.size() : text.find_first_not_of('\n'));
  while (!text.empty() && text.back() == '\n') text.pop_back();
  return text;
}

TEST(DsmlToolCallParserTest, MatchesTheReferenceParsers) {
  std::ifstream in(std::filesystem::path(__FILE__).parent_path() / "data" / "deepseek_encoder_goldens.json");
  const Json goldens = Json::parse(in);
  int num_checked = 0;
  for (const Json& golden : goldens.at("parse")) {
    std::string text = golden.at("text");
    ASSERT_EQ(text.substr(text.size() - kEos.size()), kEos);
    text.resize(text.size() - kEos.size());  // the engine stops at EOS; the detokenized text never holds it
    const std::string version = golden.at("version");
    const ChatOutputOptions options = deepseek_options(version, golden.at("thinking_mode") == "thinking");
    const Json& expected = golden.at("message");
    for (const ChatMessage& message : parse_every_way(text, options, static_cast<uint32_t>(num_checked))) {
      SCOPED_TRACE(version + ": " + text);
      EXPECT_EQ(message.reasoning_content, without_boundary_newlines(expected.at("reasoning_content")));
      EXPECT_EQ(message.content, without_boundary_newlines(expected.at("content")));
      ASSERT_EQ(message.tool_calls.size(), expected.at("tool_calls").size());
      for (size_t i = 0; i < message.tool_calls.size(); ++i) {
        const Json& function = expected["tool_calls"][i]["function"];
        EXPECT_EQ(message.tool_calls[i].name, function.at("name").get<std::string>());
        EXPECT_EQ(message.tool_calls[i].arguments, function.at("arguments").get<std::string>());
      }
    }
    ++num_checked;
  }
  EXPECT_GE(num_checked, 20);
}

struct Parsed {
  std::string content;
  std::vector<ParsedToolCall> calls;
};

Parsed parse_tool_calls(std::string_view parser_name, std::string_view text, bool byte_by_byte) {
  auto parser = find_tool_call_parser(parser_name)->make({});
  Parsed parsed;
  auto add = [&parsed](ToolCallParseDelta delta) {
    parsed.content += delta.content;
    for (auto& call : delta.calls) parsed.calls.push_back(std::move(call));
  };
  if (byte_by_byte) {
    for (char c : text) add(parser->feed(std::string_view(&c, 1)));
  } else {
    add(parser->feed(text));
  }
  add(parser->flush());
  return parsed;
}

// Parses whole and byte by byte, which must agree.
Parsed parse_both_ways(std::string_view parser_name, std::string_view text) {
  Parsed whole = parse_tool_calls(parser_name, text, false);
  Parsed streamed = parse_tool_calls(parser_name, text, true);
  EXPECT_EQ(streamed.content, whole.content) << text;
  EXPECT_EQ(streamed.calls.size(), whole.calls.size()) << text;
  for (size_t i = 0; i < std::min(streamed.calls.size(), whole.calls.size()); ++i) {
    EXPECT_EQ(streamed.calls[i].name, whole.calls[i].name) << text;
    EXPECT_EQ(streamed.calls[i].arguments, whole.calls[i].arguments) << text;
  }
  return whole;
}

const std::string kWeatherInvoke =
    "<｜DSML｜invoke name=\"get_weather\">\n"
    "<｜DSML｜parameter name=\"city\" string=\"true\">Paris</｜DSML｜parameter>\n"
    "<｜DSML｜parameter name=\"days\" string=\"false\">3</｜DSML｜parameter>\n"
    "</｜DSML｜invoke>";

std::string v4_block(const std::string& inner) {
  return "\n\n<｜DSML｜tool_calls>\n" + inner + "\n</｜DSML｜tool_calls>";
}

TEST(DsmlToolCallParserTest, RestoresArgumentTypes) {
  const Parsed parsed = parse_both_ways(
      "deepseek_v4", v4_block("<｜DSML｜invoke name=\"f\">\n"
                              "<｜DSML｜parameter name=\"s\" string=\"true\">42</｜DSML｜parameter>\n"
                              "<｜DSML｜parameter name=\"n\" string=\"false\">4.5</｜DSML｜parameter>\n"
                              "<｜DSML｜parameter name=\"b\" string=\"false\">true</｜DSML｜parameter>\n"
                              "<｜DSML｜parameter name=\"o\" string=\"false\">{\"a\":[1,null]}</｜DSML｜parameter>\n"
                              "<｜DSML｜parameter name=\"bare\" string=\"false\">not json</｜DSML｜parameter>\n"
                              "</｜DSML｜invoke>"));
  EXPECT_EQ(parsed.content, "");
  ASSERT_EQ(parsed.calls.size(), 1u);
  EXPECT_EQ(parsed.calls[0].name, "f");
  EXPECT_EQ(parsed.calls[0].arguments,
            R"({"s": "42", "n": 4.5, "b": true, "o": {"a": [1, null]}, "bare": "not json"})");
}

TEST(DsmlToolCallParserTest, HoldsBackPartialMarkers) {
  auto parser = find_tool_call_parser("deepseek_v4")->make({});
  EXPECT_EQ(parser->feed("Hi\n").content, "Hi");
  EXPECT_EQ(parser->feed("\n<｜DS").content, "");
  ToolCallParseDelta end = parser->flush();
  EXPECT_EQ(end.content, "\n\n<｜DS");
  EXPECT_TRUE(end.calls.empty());
}

TEST(DsmlToolCallParserTest, ReportsEachCallAsItsInvokeCloses) {
  auto parser = find_tool_call_parser("deepseek_v4")->make({});
  ToolCallParseDelta first = parser->feed("Checking.\n\n<｜DSML｜tool_calls>\n" + kWeatherInvoke + "\n");
  EXPECT_EQ(first.content, "Checking.");
  ASSERT_EQ(first.calls.size(), 1u);
  EXPECT_EQ(first.calls[0].arguments, R"({"city": "Paris", "days": 3})");
  ToolCallParseDelta second = parser->feed(kWeatherInvoke + "\n</｜DSML｜tool_calls>");
  EXPECT_EQ(second.calls.size(), 1u);
  EXPECT_TRUE(parser->flush().content.empty());
}

TEST(DsmlToolCallParserTest, MalformedCallsStayContent) {
  // Each is content from where it goes wrong; a block none of whose calls was reported keeps its start marker.
  const std::vector<std::string> malformed = {
      v4_block("<｜DSML｜invoke name=\"f\">\n<｜DSML｜parameter name=\"a\" string=\"maybe\">1</｜DSML｜parameter>\n</｜DSML｜invoke>"),
      v4_block("<｜DSML｜invoke name=\"f\">\n<｜DSML｜parameter name=\"a\" string=\"true\">1</｜DSML｜parameter>\n"
               "<｜DSML｜parameter name=\"a\" string=\"true\">2</｜DSML｜parameter>\n</｜DSML｜invoke>"),
      v4_block("<｜DSML｜invoke>\n</｜DSML｜invoke>"),
      v4_block("<｜DSML｜invoke name=\"\">\n</｜DSML｜invoke>"),
      v4_block("not a call"),
      v4_block("<｜DSML｜invoke name=\"f\">\n<｜DSML｜parameter name=\"a\" string=\"true\">unterminated</｜DSML｜invoke>"),
      "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n<｜DSML｜parameter name=\"a\" str",  // cut off
      "\n\n<｜DSML｜tool_calls>",
  };
  for (const std::string& text : malformed) {
    const Parsed parsed = parse_both_ways("deepseek_v4", "Intro" + text);
    EXPECT_TRUE(parsed.calls.empty()) << text;
    EXPECT_EQ(parsed.content, "Intro" + text);
  }
  // V3.2's parser does not read V4's block, nor V4's V3.2's.
  const std::string v32_text = "\n\n<｜DSML｜function_calls>\n" + kWeatherInvoke + "\n</｜DSML｜function_calls>";
  EXPECT_EQ(parse_both_ways("deepseek_v4", v32_text).content, v32_text);
  EXPECT_EQ(parse_both_ways("deepseek_v32", v32_text).calls.size(), 1u);
  EXPECT_EQ(parse_both_ways("deepseek_v32", v4_block(kWeatherInvoke)).content, v4_block(kWeatherInvoke));
}

TEST(DsmlToolCallParserTest, KeepsTheCallsBeforeAMalformedOne) {
  const Parsed parsed =
      parse_both_ways("deepseek_v4", v4_block(kWeatherInvoke + "\n<｜DSML｜invoke name=\"g\">\nbroken</｜DSML｜invoke>"));
  ASSERT_EQ(parsed.calls.size(), 1u);
  EXPECT_EQ(parsed.calls[0].name, "get_weather");
  EXPECT_EQ(parsed.content, "\n<｜DSML｜invoke name=\"g\">\nbroken</｜DSML｜invoke>\n</｜DSML｜tool_calls>");
}

TEST(DsmlToolCallParserTest, AnOutputEndingBeforeTheBlockClosesKeepsItsCalls) {
  for (std::string_view tail : {"", "\n", "\n</｜DSML｜tool_c"}) {
    const Parsed parsed = parse_both_ways("deepseek_v4", "\n\n<｜DSML｜tool_calls>\n" + kWeatherInvoke + std::string(tail));
    EXPECT_EQ(parsed.calls.size(), 1u) << tail;
    EXPECT_EQ(parsed.content, "") << tail;
  }
}

TEST(DsmlToolCallParserTest, TextAroundBlocksIsContent) {
  const Parsed parsed = parse_both_ways("deepseek_v4", "a\n" + v4_block(kWeatherInvoke) + "\n\nafter" +
                                                           v4_block(kWeatherInvoke));
  EXPECT_EQ(parsed.content, "a\nafter");
  EXPECT_EQ(parsed.calls.size(), 2u);
}

// Any cut or corruption of a valid output: no crash, and streamed parsing agrees with whole parsing.
TEST(DsmlToolCallParserTest, MutatedOutputsNeverCrash) {
  const std::string valid = "Sure." + v4_block(kWeatherInvoke + "\n" + kWeatherInvoke);
  std::mt19937 rng(7);
  for (int i = 0; i < 300; ++i) {
    std::string text = valid.substr(0, std::uniform_int_distribution<size_t>(0, valid.size())(rng));
    const int num_edits = std::uniform_int_distribution<int>(0, 3)(rng);
    for (int e = 0; e < num_edits && !text.empty(); ++e) {
      size_t at = std::uniform_int_distribution<size_t>(0, text.size() - 1)(rng);
      text[at] = "<>\"\n /a="[std::uniform_int_distribution<int>(0, 7)(rng)];
    }
    parse_both_ways("deepseek_v4", text);
  }
}

}  // namespace
}  // namespace tern::chat
