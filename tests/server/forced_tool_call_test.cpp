// Forced tool choice writes calls in the selected tool-call parser's syntax: for each parser that supports it, a
// well-formed output in that format (written by hand from the format's documentation) is accepted by the grammar
// and read back by the parser as the same calls; arguments off the schema are refused; formats forced tool choice
// cannot write are a 400 naming tool_choice.
#include <gtest/gtest.h>

#include "chat/chat_output_parser.h"
#include "grammar/grammar_matcher.h"
#include "server/api_error.h"
#include "server/structured_output.h"

namespace tern::server {
namespace {

const Json kTools = Json::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
    "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
  {"type": "function", "function": {"name": "add", "parameters": {"type": "object",
    "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}}}])");

std::shared_ptr<const grammar::TokenVocabulary> byte_vocabulary() {
  std::vector<std::string> bytes;
  for (int b = 0; b < 256; ++b) bytes.push_back(std::string(1, static_cast<char>(b)));
  bytes.push_back("");  // EOS
  return std::make_shared<const grammar::TokenVocabulary>(std::move(bytes), std::vector<int32_t>{256});
}

bool grammar_accepts(const OutputConstraint& constraint, std::string_view output) {
  auto compiled = grammar::CompiledGrammar::compile(constraint.kind, constraint.source, byte_vocabulary());
  grammar::GrammarMatcher matcher(compiled);
  return matcher.accept_bytes(output) && matcher.is_accepting();
}

struct FormatCase {
  std::string parser;
  std::string two_calls;       // get_weather(city="Paris") then add(a=1, b=2)
  std::string off_the_schema;  // get_weather with a number for the city
};

TEST(ForcedToolCallTest, GrammarFollowsTheParserSyntax) {
  const FormatCase cases[] = {
      {"hermes",
       "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n"
       "{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}\n</tool_call>",
       "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": 5}}\n</tool_call>"},
      {"llama3_json",
       "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}; {\"name\": \"add\", \"parameters\": "
       "{\"a\": 1, \"b\": 2}}",
       "{\"name\": \"get_weather\", \"parameters\": {\"city\": 5}}"},
      {"deepseek_v3",
       "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Paris\"}\n```"
       "<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>add\n```json\n{\"a\": 1, \"b\": 2}\n```"
       "<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
       "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": 5}\n```"
       "<｜tool▁call▁end｜><｜tool▁calls▁end｜>"},
      {"deepseek_v31",
       "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": \"Paris\"}<｜tool▁call▁end｜>"
       "<｜tool▁call▁begin｜>add<｜tool▁sep｜>{\"a\": 1, \"b\": 2}<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
       "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": 5}<｜tool▁call▁end｜>"
       "<｜tool▁calls▁end｜>"},
      {"mistral",
       "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}, {\"name\": \"add\", "
       "\"arguments\": {\"a\": 1, \"b\": 2}}]",
       "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": 5}}]"},
      {"kimi_k2",
       "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>"
       "{\"city\": \"Paris\"}<|tool_call_end|><|tool_call_begin|>functions.add:0<|tool_call_argument_begin|>"
       "{\"a\": 1, \"b\": 2}<|tool_call_end|><|tool_calls_section_end|>",
       "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>"
       "{\"city\": 5}<|tool_call_end|><|tool_calls_section_end|>"},
      {"deepseek_v32",
       "\n\n<｜DSML｜function_calls>\n<｜DSML｜invoke name=\"get_weather\">\n<｜DSML｜parameter name=\"city\" "
       "string=\"true\">Paris</｜DSML｜parameter>\n</｜DSML｜invoke>\n<｜DSML｜invoke name=\"add\">\n<｜DSML｜parameter "
       "name=\"a\" string=\"false\">1</｜DSML｜parameter>\n<｜DSML｜parameter name=\"b\" string=\"false\">2"
       "</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜function_calls>",
       "\n\n<｜DSML｜function_calls>\n<｜DSML｜invoke name=\"get_weather\">\n<｜DSML｜parameter name=\"city\" "
       "string=\"false\">5</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜function_calls>"},
      {"deepseek_v4",
       "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n<｜DSML｜parameter name=\"city\" "
       "string=\"true\">Paris</｜DSML｜parameter>\n</｜DSML｜invoke>\n<｜DSML｜invoke name=\"add\">\n<｜DSML｜parameter "
       "name=\"a\" string=\"false\">1</｜DSML｜parameter>\n<｜DSML｜parameter name=\"b\" string=\"false\">2"
       "</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>",
       "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n<｜DSML｜parameter name=\"city\" "
       "string=\"false\">5</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>"},
  };
  for (const FormatCase& c : cases) {
    SCOPED_TRACE(c.parser);
    const OutputConstraint required = tool_call_constraint(kTools, std::nullopt, c.parser);
    EXPECT_TRUE(grammar_accepts(required, c.two_calls)) << required.source;
    EXPECT_FALSE(grammar_accepts(required, c.off_the_schema));

    chat::ChatOutputOptions options;
    options.tool_call_parser = c.parser;
    const chat::ChatMessage message = chat::ChatOutputParser::parse(c.two_calls, options);
    EXPECT_EQ(message.content, "");
    ASSERT_EQ(message.tool_calls.size(), 2u);
    EXPECT_EQ(message.tool_calls[0].name, "get_weather");
    EXPECT_EQ(message.tool_calls[0].arguments, R"({"city": "Paris"})");
    EXPECT_EQ(message.tool_calls[1].name, "add");
    EXPECT_EQ(message.tool_calls[1].arguments, R"({"a": 1, "b": 2})");

    // A named function: one call, to that function only.
    const OutputConstraint named = tool_call_constraint(kTools, std::string("get_weather"), c.parser);
    EXPECT_FALSE(grammar_accepts(named, c.two_calls));
  }
}

chat::ChatMessage parse_harmony(std::string_view output) {
  chat::ChatOutputOptions options;
  options.reasoning_parser = "gpt_oss";
  options.tool_call_parser = "openai";
  return chat::ChatOutputParser::parse(output, options);
}

// Harmony's <|call|> ends the assistant's turn, so "required" is one call; the call's end is the <|call|> EOS
// token, which the engine leaves out of the text, so the grammar ends at the arguments.
TEST(ForcedToolCallTest, HarmonyWritesOneCallEndedByTheCallToken) {
  const std::string weather =
      "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Paris\"}";
  const std::string add = "<|channel|>commentary to=functions.add <|constrain|>json<|message|>{\"a\": 1, \"b\": 2}";
  const OutputConstraint required = tool_call_constraint(kTools, std::nullopt, "openai");
  EXPECT_TRUE(grammar_accepts(required, weather)) << required.source;
  EXPECT_TRUE(grammar_accepts(required, add));
  EXPECT_FALSE(grammar_accepts(required, weather + "<|call|>" + add));
  EXPECT_FALSE(grammar_accepts(
      required, "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": 5}"));
  const OutputConstraint named = tool_call_constraint(kTools, std::string("add"), "openai");
  EXPECT_TRUE(grammar_accepts(named, add));
  EXPECT_FALSE(grammar_accepts(named, weather));

  for (const std::string& output : {weather, weather + "<|call|>"}) {
    SCOPED_TRACE(output);
    const chat::ChatMessage message = parse_harmony(output);
    EXPECT_EQ(message.content, "");
    EXPECT_EQ(message.reasoning_content, "");
    ASSERT_EQ(message.tool_calls.size(), 1u);
    EXPECT_EQ(message.tool_calls[0].name, "get_weather");
    EXPECT_EQ(message.tool_calls[0].arguments, R"({"city": "Paris"})");
  }
}

chat::ChatMessage parse_dsml(std::string_view output) {
  chat::ChatOutputOptions options;
  options.tool_call_parser = "deepseek_v4";
  return chat::ChatOutputParser::parse(output, options);
}

std::string dsml_call(std::string_view name, std::string_view parameters) {
  return "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"" + std::string(name) + "\">\n" + std::string(parameters) +
         "</｜DSML｜invoke>\n</｜DSML｜tool_calls>";
}

std::string dsml_parameter(std::string_view key, bool is_string, std::string_view value) {
  return "<｜DSML｜parameter name=\"" + std::string(key) + "\" string=\"" + (is_string ? "true" : "false") + "\">" +
         std::string(value) + "</｜DSML｜parameter>\n";
}

// DSML arguments are one parameter per schema property: each output the grammar accepts is read back as arguments
// that follow the schema (checked against the JSON the parser reports), and outputs off the schema are refused.
TEST(ForcedToolCallTest, DsmlParametersFollowTheSchema) {
  const Json tools = Json::parse(R"([{"type": "function", "function": {"name": "plan", "parameters": {
    "type": "object", "$defs": {"day": {"type": "integer", "minimum": 1, "maximum": 7}},
    "properties": {
      "note": {"type": "string", "description": "free text"},
      "mode": {"type": "string", "enum": ["fast", "slow"]},
      "code": {"type": "string", "pattern": "^[A-Z]{3}$"},
      "day": {"$ref": "#/$defs/day"},
      "tags": {"type": "array", "items": {"type": "string"}},
      "urgent": {"type": "boolean"}},
    "required": ["note", "day"]}}}])");
  const OutputConstraint constraint = tool_call_constraint(tools, std::string("plan"), "deepseek_v4");
  const std::string note = dsml_parameter("note", true, "a < b, </ not a tag\n\"quoted\"");
  const std::string day = dsml_parameter("day", false, "3");

  struct Accepted {
    std::string parameters;
    Json arguments;
  };
  const Accepted accepted[] = {
      {note + day, {{"note", "a < b, </ not a tag\n\"quoted\""}, {"day", 3}}},
      {note + dsml_parameter("mode", true, "slow") + dsml_parameter("code", false, "\"ABC\"") + day +
           dsml_parameter("tags", false, "[\"x\", \"y\"]") + dsml_parameter("urgent", false, "true"),
       {{"note", "a < b, </ not a tag\n\"quoted\""}, {"mode", "slow"}, {"code", "ABC"}, {"day", 3},
        {"tags", {"x", "y"}}, {"urgent", true}}},
      {dsml_parameter("note", true, "") + day, {{"note", ""}, {"day", 3}}},
      {dsml_parameter("note", true, "ends with a partial tag </｜DSML｜param") + day,
       {{"note", "ends with a partial tag </｜DSML｜param"}, {"day", 3}}},
  };
  for (const Accepted& a : accepted) {
    const std::string output = dsml_call("plan", a.parameters);
    SCOPED_TRACE(output);
    EXPECT_TRUE(grammar_accepts(constraint, output)) << constraint.source;
    const chat::ChatMessage message = parse_dsml(output);
    EXPECT_EQ(message.content, "");
    ASSERT_EQ(message.tool_calls.size(), 1u);
    EXPECT_EQ(message.tool_calls[0].name, "plan");
    EXPECT_EQ(Json::parse(message.tool_calls[0].arguments), a.arguments);
  }

  const std::string refused[] = {
      day,                                                                  // the required note is missing
      day + note,                                                           // out of the schema's order
      note + dsml_parameter("day", false, "8"),                             // above the maximum
      note + dsml_parameter("day", true, "3"),                              // a number written as text
      dsml_parameter("note", false, "\"x\"") + day,                         // a plain string written as JSON
      dsml_parameter("note", true, "x</｜DSML｜parameter>y") + day,          // text holding the closing tag
      note + dsml_parameter("mode", true, "medium") + day,                  // not in the enum
      note + dsml_parameter("code", true, "ABC") + day,                     // a pattern is enforced as JSON
      note + dsml_parameter("code", false, "\"AB\"") + day,                 // off the pattern
      note + day + dsml_parameter("extra", true, "x"),                      // not a property
  };
  for (const std::string& parameters : refused) {
    SCOPED_TRACE(parameters);
    EXPECT_FALSE(grammar_accepts(constraint, dsml_call("plan", parameters)));
  }
}

TEST(ForcedToolCallTest, DsmlNeedsAnObjectSchema) {
  const Json tools =
      Json::parse(R"([{"type": "function", "function": {"name": "f", "parameters": {"type": "array"}}}])");
  try {
    tool_call_constraint(tools, std::nullopt, "deepseek_v32");
    ADD_FAILURE() << "no error";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400);
    EXPECT_EQ(e.param(), "tools");
  }
}

TEST(ForcedToolCallTest, FormatsThatCannotBeForcedAre400) {
  for (const char* parser : {"glm45", "qwen3_coder", "pythonic", ""}) {
    SCOPED_TRACE(parser);
    try {
      tool_call_constraint(kTools, std::nullopt, parser);
      ADD_FAILURE() << "no error";
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status(), 400);
      EXPECT_EQ(e.param(), "tool_choice");
      EXPECT_NE(std::string(e.what()).find("hermes"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace tern::server
