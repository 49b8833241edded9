// Forced tool choice writes calls in the selected tool-call parser's syntax: for each parser that supports it, a
// well-formed output in that format (written by hand from the format's documentation) is accepted by the grammar
// and read back by the parser as the same calls; arguments off the schema are refused; a model with no tool-call
// format is a 400 naming tool_choice.
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
  std::string off_the_schema;  // get_weather with a number for the city, or add with a fraction
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
      {"glm45",
       "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n</tool_call>\n<tool_call>add\n"
       "<arg_key>a</arg_key>\n<arg_value>1</arg_value>\n<arg_key>b</arg_key>\n<arg_value>2</arg_value>\n</tool_call>",
       "<tool_call>add\n<arg_key>a</arg_key>\n<arg_value>1.5</arg_value>\n<arg_key>b</arg_key>\n<arg_value>2"
       "</arg_value>\n</tool_call>"},
      {"qwen3_coder",
       "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>\n"
       "<tool_call>\n<function=add>\n<parameter=a>\n1\n</parameter>\n<parameter=b>\n2\n</parameter>\n</function>\n"
       "</tool_call>",
       "<tool_call>\n<function=add>\n<parameter=a>\n1.5\n</parameter>\n<parameter=b>\n2\n</parameter>\n</function>\n"
       "</tool_call>"},
      {"pythonic", "[get_weather(city=\"Paris\"), add(a=1, b=2)]", "[get_weather(city=5)]"},
  };
  for (const FormatCase& c : cases) {
    SCOPED_TRACE(c.parser);
    const OutputConstraint required = tool_call_constraint(kTools, std::nullopt, c.parser);
    EXPECT_TRUE(grammar_accepts(required, c.two_calls)) << required.source;
    EXPECT_FALSE(grammar_accepts(required, c.off_the_schema));

    chat::ChatOutputOptions options;
    options.tool_call_parser = c.parser;
    options.tool_schemas = chat::tool_parameter_schemas(kTools);
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

struct TaggedFormat {
  std::string parser;
  std::string (*call)(std::string_view name, std::string_view parameters);
  std::string (*parameter)(std::string_view key, std::string_view value);
  std::string value_end_tag;
};

const TaggedFormat kTaggedFormats[] = {
    {"glm45",
     [](std::string_view name, std::string_view parameters) {
       return "<tool_call>" + std::string(name) + "\n" + std::string(parameters) + "</tool_call>";
     },
     [](std::string_view key, std::string_view value) {
       return "<arg_key>" + std::string(key) + "</arg_key>\n<arg_value>" + std::string(value) + "</arg_value>\n";
     },
     "</arg_value>"},
    {"qwen3_coder",
     [](std::string_view name, std::string_view parameters) {
       return "<tool_call>\n<function=" + std::string(name) + ">\n" + std::string(parameters) +
              "</function>\n</tool_call>";
     },
     [](std::string_view key, std::string_view value) {
       return "<parameter=" + std::string(key) + ">\n" + std::string(value) + "\n</parameter>\n";
     },
     "</parameter>"},
};

const Json kPlanTools = Json::parse(R"([{"type": "function", "function": {"name": "plan", "parameters": {
  "type": "object", "$defs": {"day": {"type": "integer", "minimum": 1, "maximum": 7}},
  "properties": {
    "note": {"type": "string", "description": "free text"},
    "mode": {"type": "string", "enum": ["fast", "slow"]},
    "day": {"$ref": "#/$defs/day"},
    "tags": {"type": "array", "items": {"type": "string"}},
    "label": {"anyOf": [{"type": "string"}, {"type": "null"}]},
    "urgent": {"type": "boolean"}},
  "required": ["note", "day"]}}}])");

// GLM-4.5's and Qwen3-Coder's arguments are one tagged parameter per schema property, strings as bare text: each
// output the grammar accepts is read back, by the tool schemas, as arguments that follow the schema (text that looks
// like JSON stays a string), and outputs off the schema are refused.
TEST(ForcedToolCallTest, TaggedParametersFollowTheSchema) {
  for (const TaggedFormat& format : kTaggedFormats) {
    SCOPED_TRACE(format.parser);
    const OutputConstraint constraint = tool_call_constraint(kPlanTools, std::string("plan"), format.parser);
    chat::ChatOutputOptions options;
    options.tool_call_parser = format.parser;
    options.tool_schemas = chat::tool_parameter_schemas(kPlanTools);
    const std::string note = format.parameter("note", "a < b, </ not a tag\n\"quoted\"");
    const std::string day = format.parameter("day", "3");

    struct Accepted {
      std::string parameters;
      Json arguments;
    };
    const Accepted accepted[] = {
        {note + day, {{"note", "a < b, </ not a tag\n\"quoted\""}, {"day", 3}}},
        {format.parameter("note", "123") + format.parameter("mode", "slow") + day +
             format.parameter("tags", "[\"x\", \"y\"]") + format.parameter("label", "\"true\"") +
             format.parameter("urgent", "true"),
         {{"note", "123"}, {"mode", "slow"}, {"day", 3}, {"tags", {"x", "y"}}, {"label", "true"}, {"urgent", true}}},
        {format.parameter("note", "true") + day + format.parameter("label", "null"),
         {{"note", "true"}, {"day", 3}, {"label", nullptr}}},
        {format.parameter("note", "") + day, {{"note", ""}, {"day", 3}}},
        {format.parameter("note", "ends with partial tags </tool_ca</arg_val</param") + day,
         {{"note", "ends with partial tags </tool_ca</arg_val</param"}, {"day", 3}}},
    };
    for (const Accepted& a : accepted) {
      const std::string output = format.call("plan", a.parameters);
      SCOPED_TRACE(output);
      EXPECT_TRUE(grammar_accepts(constraint, output)) << constraint.source;
      const chat::ChatMessage message = chat::ChatOutputParser::parse(output, options);
      EXPECT_EQ(message.content, "");
      ASSERT_EQ(message.tool_calls.size(), 1u);
      EXPECT_EQ(message.tool_calls[0].name, "plan");
      EXPECT_EQ(Json::parse(message.tool_calls[0].arguments), a.arguments);
    }

    const std::string refused[] = {
        day,                                                               // the required note is missing
        day + note,                                                        // out of the schema's order
        note + format.parameter("day", "8"),                               // above the maximum
        note + format.parameter("day", "\"3\""),                           // a number written as a JSON string
        format.parameter("note", "x" + format.value_end_tag + "y") + day,  // text holding a closing tag
        format.parameter("note", "x</tool_call>y") + day,
        note + format.parameter("mode", "medium") + day,                   // not in the enum
        note + day + format.parameter("label", "bare"),                    // not a string nor null as JSON
        note + day + format.parameter("extra", "x"),                       // not a property
    };
    for (const std::string& parameters : refused) {
      SCOPED_TRACE(parameters);
      EXPECT_FALSE(grammar_accepts(constraint, format.call("plan", parameters)));
    }
  }
}

// What the tagged formats cannot write so that their parsers read it back is a 400 naming tools.
TEST(ForcedToolCallTest, TaggedParametersRefuseWhatTheParserCannotReadBack) {
  const char* parameter_schemas[] = {
      R"({"type": "array"})",                                                           // not an object
      R"({"type": "object", "properties": {"code": {"type": "string", "pattern": "^A"}}})",  // bare text has no pattern
      R"({"type": "object", "properties": {"a>b": {"type": "integer"}}})",              // a key the parser cuts
      R"({"type": "object", "properties": {" a": {"type": "integer"}}})",               // a key the parser trims
  };
  const Json bad_function_name = {
      {{"type", "function"}, {"function", {{"name", "f>g"}, {"parameters", {{"type", "object"}}}}}}};
  for (const TaggedFormat& format : kTaggedFormats) {
    for (const char* parameters : parameter_schemas) {
      SCOPED_TRACE(format.parser + " " + parameters);
      const Json function = {{"name", "f"}, {"parameters", Json::parse(parameters)}};
      const Json tools = {{{"type", "function"}, {"function", function}}};
      try {
        tool_call_constraint(tools, std::nullopt, format.parser);
        ADD_FAILURE() << "no error";
      } catch (const ApiError& e) {
        EXPECT_EQ(e.status(), 400);
        EXPECT_EQ(e.param(), "tools");
      }
    }
    EXPECT_THROW(tool_call_constraint(bad_function_name, std::nullopt, format.parser), ApiError);
  }
}

// Pythonic arguments are keyword arguments in the schema's order with values as Python literals of the property's
// type; each output the grammar accepts is read back as the same arguments, and outputs off the schema are refused.
TEST(ForcedToolCallTest, PythonicArgumentsFollowTheSchema) {
  const Json tools = Json::parse(R"([{"type": "function", "function": {"name": "plan", "parameters": {
    "type": "object",
    "properties": {
      "mode": {"type": "string", "enum": ["fast", "slow\n\"x\""]},
      "note": {"type": "string"},
      "day": {"type": "integer"},
      "ratio": {"type": "number"},
      "tags": {"type": "array", "items": {"type": "string"}},
      "label": {"type": ["string", "null"]},
      "extra": {"type": "object"},
      "urgent": {"type": "boolean"}},
    "required": ["note", "day"]}}}])");
  const OutputConstraint constraint = tool_call_constraint(tools, std::string("plan"), "pythonic");
  chat::ChatOutputOptions options;
  options.tool_call_parser = "pythonic";

  struct Accepted {
    std::string arguments;
    Json parsed;
  };
  const Accepted accepted[] = {
      {"note=\"a\", day=3", {{"note", "a"}, {"day", 3}}},
      {"mode=\"slow\\n\\\"x\\\"\", note=\"\\\\ é \\t\", day=-0, ratio=1.5e-3, tags=[\"x\", \"y\"], label=None, "
       "extra={\"k\": [1, True, {}]}, urgent=False",
       {{"mode", "slow\n\"x\""}, {"note", "\\ é \t"}, {"day", 0}, {"ratio", 1.5e-3}, {"tags", {"x", "y"}},
        {"label", nullptr}, {"extra", {{"k", {1, true, Json::object()}}}}, {"urgent", false}}},
      {"note=\"\", day=999999999999999, ratio=7, label=\"z\"",
       {{"note", ""}, {"day", 999999999999999}, {"ratio", 7}, {"label", "z"}}},
  };
  for (const Accepted& a : accepted) {
    const std::string output = "[plan(" + a.arguments + ")]";
    SCOPED_TRACE(output);
    EXPECT_TRUE(grammar_accepts(constraint, output)) << constraint.source;
    const chat::ChatMessage message = chat::ChatOutputParser::parse(output, options);
    EXPECT_EQ(message.content, "");
    ASSERT_EQ(message.tool_calls.size(), 1u);
    EXPECT_EQ(Json::parse(message.tool_calls[0].arguments), a.parsed);
  }

  const std::string refused[] = {
      "day=3",                                       // the required note is missing
      "day=3, note=\"a\"",                           // out of the schema's order
      "note=\"a\", day=3.0",                         // a float for an integer
      "note='a', day=3",                             // single quotes
      "note=\"a\", day=1234567890123456789012",      // more digits than the parser reads
      "note=\"a\", day=3, ratio=1e999",              // an exponent the parser cannot read
      "mode=\"medium\", note=\"a\", day=3",          // not in the enum
      "note=\"a\", day=3, urgent=true",              // JSON's true
      "note=\"a\", day=3, extra={1: 2}",             // a key that is not a string
      "note=\"a\", day=3, other=1",                  // not a property
  };
  for (const std::string& arguments : refused) {
    SCOPED_TRACE(arguments);
    EXPECT_FALSE(grammar_accepts(constraint, "[plan(" + arguments + ")]"));
  }

  const Json bad_name = Json::parse(R"([{"type": "function", "function": {"name": "f", "parameters": {
    "type": "object", "properties": {"not-an-identifier": {"type": "integer"}}}}}])");
  EXPECT_THROW(tool_call_constraint(bad_name, std::nullopt, "pythonic"), ApiError);
  const Json bad_function_name = {
      {{"type", "function"}, {"function", {{"name", "get-weather"}, {"parameters", {{"type", "object"}}}}}}};
  EXPECT_THROW(tool_call_constraint(bad_function_name, std::nullopt, "pythonic"), ApiError);
}

// Every registered format can be forced; a model whose chat template writes no tool calls cannot.
TEST(ForcedToolCallTest, NoToolCallFormatIs400) {
  try {
    tool_call_constraint(kTools, std::nullopt, "");
    ADD_FAILURE() << "no error";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400);
    EXPECT_EQ(e.param(), "tool_choice");
    EXPECT_NE(std::string(e.what()).find("hermes"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tern::server
