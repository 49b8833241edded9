// Pythonic tool calls (Llama 3.2 / 4, ToolACE), on outputs as vLLM's pythonic tool-parser tests feed them.
#include <gtest/gtest.h>

#include "output_parser_checks.h"

namespace tern::chat {
namespace {

using parser_checks::expect_parsed;
using parser_checks::expect_prefixes_parse;
using parser_checks::parser_options;

TEST(PythonicToolCallTest, ParsesAListOfCalls) {
  expect_parsed(
      "[get_weather(city='San Francisco', metric='celsius'), register_user(name=\"John Doe\", age=37, "
      "address={'city': 'San Francisco', 'state': 'CA'}, role=None, passed_test=True, aliases=['John', 'Johnny'], "
      "score=-1.5e2, pair=(1, 2))]",
      parser_options("pythonic"),
      {"",
       "",
       {{"get_weather", R"({"city": "San Francisco", "metric": "celsius"})"},
        {"register_user",
         R"({"name": "John Doe", "age": 37, "address": {"city": "San Francisco", "state": "CA"}, "role": null, )"
         R"("passed_test": true, "aliases": ["John", "Johnny"], "score": -150.0, "pair": [1, 2]})"}}});
}

TEST(PythonicToolCallTest, EscapesAndLlama4Markers) {
  expect_parsed("<|python_start|>[f(text='it\\'s \\u00e9\\n', empty=[]), g()]<|python_end|>",
                parser_options("pythonic"), {"", "", {{"f", R"({"text": "it's é\n", "empty": []})"}, {"g", "{}"}}});
}

TEST(PythonicToolCallTest, AnythingElseIsContent) {
  expect_parsed("The answer is [1, 2].", parser_options("pythonic"), {"", "The answer is [1, 2].", {}});
  expect_parsed("[1, 2]", parser_options("pythonic"), {"", "[1, 2]", {}});
  expect_parsed("[f(a=1)] trailing", parser_options("pythonic"), {"", "[f(a=1)] trailing", {}});
  expect_parsed("[f(a=x)]", parser_options("pythonic"), {"", "[f(a=x)]", {}});
  expect_parsed("[f(a='unterminated)]", parser_options("pythonic"), {"", "[f(a='unterminated)]", {}});
  expect_parsed(std::string(2000, '[') + "f()", parser_options("pythonic"), {"", std::string(2000, '[') + "f()", {}});
  expect_parsed("[f(a=" + std::string(2000, '[') + ")]", parser_options("pythonic"),
                {"", "[f(a=" + std::string(2000, '[') + ")]", {}});
  expect_prefixes_parse("[f(a={'k': [1, 'x']}, b=2.0), g(c=False)]", parser_options("pythonic"));
}

}  // namespace
}  // namespace tern::chat
