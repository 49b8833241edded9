// Qwen3-Coder XML tool calls, on outputs as Qwen3-Coder's chat template writes them back (and vLLM's qwen3coder
// tests feed them).
#include <gtest/gtest.h>

#include "output_parser_checks.h"

namespace tern::chat {
namespace {

using parser_checks::expect_parsed;
using parser_checks::expect_prefixes_parse;
using parser_checks::parser_options;

TEST(Qwen3CoderToolCallTest, ParsesFunctionsAndParameters) {
  expect_parsed(
      "Sure.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nDallas\n</parameter>\n<parameter=unit>\n"
      "fahrenheit\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=write>\n<parameter=text>\n"
      "line 1\nline 2\n</parameter>\n<parameter=count>\n2\n</parameter>\n</function>\n</tool_call>",
      parser_options("qwen3_coder"),
      {"",
       "Sure.\n",
       {{"get_weather", R"({"city": "Dallas", "unit": "fahrenheit"})"},
        {"write", R"({"text": "line 1\nline 2", "count": 2})"}}});
}

TEST(Qwen3CoderToolCallTest, MissingFunctionEndAtTheEndOfOutput) {
  expect_parsed("<tool_call>\n<function=f>\n<parameter=a>\nx\n</parameter>\n", parser_options("qwen3_coder"),
                {"", "", {{"f", R"({"a": "x"})"}}});
}

// As vLLM's qwen3_coder parser does: with the request's tools known, a string parameter stays the text it is even
// when the text is JSON; parameters of other types, and any parameter of an unknown tool, read as JSON first.
TEST(Qwen3CoderToolCallTest, ValuesReadByTheToolSchema) {
  const std::string output =
      "<tool_call>\n<function=f>\n<parameter=code>\n123\n</parameter>\n<parameter=flag>\nnull\n</parameter>\n"
      "<parameter=count>\n7\n</parameter>\n</function>\n</tool_call>";
  ChatOutputOptions options = parser_options("qwen3_coder");
  options.tool_schemas = tool_parameter_schemas(nlohmann::ordered_json::parse(R"([{"type": "function",
    "function": {"name": "f", "parameters": {"type": "object", "properties": {"code": {"type": "string"},
    "flag": {"type": "string"}, "count": {"type": "integer"}}}}}])"));
  expect_parsed(output, options, {"", "", {{"f", R"({"code": "123", "flag": "null", "count": 7})"}}});
  expect_parsed(output, parser_options("qwen3_coder"),
                {"", "", {{"f", R"({"code": 123, "flag": null, "count": 7})"}}});
  options.tool_schemas = tool_parameter_schemas(nlohmann::ordered_json::parse(
      R"([{"type": "function", "function": {"name": "other", "parameters": {"type": "object",
      "properties": {"code": {"type": "string"}}}}}])"));
  expect_parsed(output, options, {"", "", {{"f", R"({"code": 123, "flag": null, "count": 7})"}}});
}

TEST(Qwen3CoderToolCallTest, MalformedCallsStayContent) {
  const std::string json_body = "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>";
  expect_parsed(json_body, parser_options("qwen3_coder"), {"", json_body, {}});
  const std::string unclosed_parameter = "<tool_call>\n<function=f>\n<parameter=a>\nx\n</function>\n</tool_call>";
  expect_parsed(unclosed_parameter, parser_options("qwen3_coder"), {"", unclosed_parameter, {}});
  expect_prefixes_parse("<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n</function>\n</tool_call>",
                        parser_options("qwen3_coder"));
}

}  // namespace
}  // namespace tern::chat
