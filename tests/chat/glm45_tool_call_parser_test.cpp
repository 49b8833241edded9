// GLM-4.5 tool calls, on outputs as GLM-4.5's chat template writes them back (and vLLM's glm4_moe tests feed them).
#include <gtest/gtest.h>

#include "output_parser_checks.h"

namespace tern::chat {
namespace {

using parser_checks::expect_parsed;
using parser_checks::expect_prefixes_parse;
using parser_checks::parser_options;

TEST(Glm45ToolCallTest, ParsesKeysAndValues) {
  expect_parsed(
      "Checking.\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Beijing</arg_value>\n"
      "<arg_key>date</arg_key>\n<arg_value>2024-06-27</arg_value>\n</tool_call>\n<tool_call>get_time\n"
      "<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n<arg_key>opts</arg_key>\n<arg_value>{\"a\": [true]}"
      "</arg_value>\n</tool_call>",
      parser_options("glm45", "qwen3"),
      {"",
       "Checking.\n",
       {{"get_weather", R"({"city": "Beijing", "date": "2024-06-27"})"},
        {"get_time", R"({"days": 3, "opts": {"a": [true]}})"}}});
}

TEST(Glm45ToolCallTest, CallWithoutArguments) {
  expect_parsed("<tool_call>list_files\n</tool_call>", parser_options("glm45"), {"", "", {{"list_files", "{}"}}});
}

// As vLLM's glm4_moe parser does: with the request's tools known, a string parameter stays the text it is even when
// the text is JSON; parameters of other types, and any parameter of an unknown tool, read as JSON first.
TEST(Glm45ToolCallTest, ValuesReadByTheToolSchema) {
  const std::string output =
      "<tool_call>f\n<arg_key>code</arg_key>\n<arg_value>123</arg_value>\n<arg_key>flag</arg_key>\n"
      "<arg_value>true</arg_value>\n<arg_key>count</arg_key>\n<arg_value>7</arg_value>\n</tool_call>";
  ChatOutputOptions options = parser_options("glm45");
  options.tool_schemas = tool_parameter_schemas(nlohmann::ordered_json::parse(R"([{"type": "function",
    "function": {"name": "f", "parameters": {"type": "object", "properties": {"code": {"type": "string"},
    "flag": {"type": "string"}, "count": {"type": "integer"}}}}}])"));
  expect_parsed(output, options, {"", "", {{"f", R"({"code": "123", "flag": "true", "count": 7})"}}});
  expect_parsed(output, parser_options("glm45"), {"", "", {{"f", R"({"code": 123, "flag": true, "count": 7})"}}});
}

TEST(Glm45ToolCallTest, MalformedCallsStayContent) {
  const std::string value_without_key = "<tool_call>f\n<arg_value>1</arg_value>\n</tool_call>";
  expect_parsed(value_without_key, parser_options("glm45"), {"", value_without_key, {}});
  const std::string unclosed_value = "<tool_call>f\n<arg_key>a</arg_key>\n<arg_value>1";
  expect_parsed(unclosed_value, parser_options("glm45"), {"", unclosed_value, {}});
  expect_parsed("<tool_call>", parser_options("glm45"), {"", "<tool_call>", {}});
  expect_prefixes_parse("x<tool_call>f\n<arg_key>a</arg_key>\n<arg_value>b</arg_value>\n</tool_call>",
                        parser_options("glm45"));
}

}  // namespace
}  // namespace tern::chat
