// Request bodies -> CompletionRequest / ChatRequest (engine parameters) and the errors clients get for bad ones.
// The expected values are OpenAI's documented defaults and ranges and vLLM's extensions.
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <string>

#include "server/api_error.h"
#include "server/chat_request.h"
#include "server/completion_request.h"
#include "server/request_body.h"

namespace tern::server {
namespace {

Json body(const char* text) { return Json::parse(text); }

// Runs `action` and checks it throws an ApiError with `status` naming `param`.
void expect_error(const std::function<void()>& action, int status, const std::string& param) {
  try {
    action();
    FAIL() << "expected an ApiError about " << param;
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), status) << e.what();
    EXPECT_EQ(e.param().value_or(""), param) << e.what();
    EXPECT_FALSE(std::string(e.what()).empty());
  }
}

void expect_completion_error(const char* text, const std::string& param) {
  expect_error([&] { CompletionRequest::parse(body(text)); }, 400, param);
}

void expect_chat_error(const char* text, const std::string& param) {
  expect_error([&] { ChatRequest::parse(body(text)); }, 400, param);
}

TEST(CompletionRequestTest, DefaultsFollowOpenAi) {
  const auto request = CompletionRequest::parse(body(R"({"model": "m", "prompt": "hello"})"));
  ASSERT_EQ(request.prompts.size(), 1u);
  EXPECT_EQ(request.prompts[0].text, "hello");
  EXPECT_EQ(request.options.model, "m");
  EXPECT_EQ(request.options.stop.max_tokens, 16);  // OpenAI's completions default
  EXPECT_FLOAT_EQ(request.options.sampling.temperature, 1.0f);
  EXPECT_FLOAT_EQ(request.options.sampling.top_p, 1.0f);
  EXPECT_EQ(request.options.sampling.n, 1);
  EXPECT_FALSE(request.options.sampling.logprobs.has_value());
  EXPECT_FALSE(request.options.stream);
  EXPECT_FALSE(request.echo);
}

TEST(CompletionRequestTest, ReadsEverySamplingField) {
  const auto request = CompletionRequest::parse(body(R"({
    "prompt": [1, 2, 3], "max_tokens": 7, "temperature": 0.5, "top_p": 0.9, "top_k": 40, "min_p": 0.05, "n": 3,
    "stop": ["\n\n", "END"], "stop_token_ids": [7], "seed": -5, "presence_penalty": 0.5, "frequency_penalty": -0.5,
    "repetition_penalty": 1.1, "logit_bias": {"42": -100, "7": 2.5}, "logprobs": 3, "ignore_eos": true,
    "stream": true, "stream_options": {"include_usage": true}, "unknown_field": {"nested": [1, 2]}})"));
  ASSERT_EQ(request.prompts.size(), 1u);
  EXPECT_FALSE(request.prompts[0].text.has_value());
  EXPECT_EQ(request.prompts[0].token_ids, (std::vector<int32_t>{1, 2, 3}));
  const auto& sampling = request.options.sampling;
  EXPECT_EQ(request.options.stop.max_tokens, 7);
  EXPECT_FLOAT_EQ(sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(sampling.top_p, 0.9f);
  EXPECT_EQ(sampling.top_k, 40);
  EXPECT_FLOAT_EQ(sampling.min_p, 0.05f);
  EXPECT_EQ(sampling.n, 3);
  EXPECT_EQ(request.options.stop.stop_strings, (std::vector<std::string>{"\n\n", "END"}));
  EXPECT_EQ(request.options.stop.stop_token_ids, (std::vector<int32_t>{7}));
  EXPECT_EQ(sampling.seed, static_cast<uint64_t>(int64_t{-5}));
  EXPECT_FLOAT_EQ(sampling.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(sampling.frequency_penalty, -0.5f);
  EXPECT_FLOAT_EQ(sampling.repetition_penalty, 1.1f);
  ASSERT_EQ(sampling.logit_bias.size(), 2u);
  EXPECT_EQ(sampling.logit_bias[0], (std::pair<int32_t, float>{42, -100.0f}));
  EXPECT_EQ(sampling.logit_bias[1], (std::pair<int32_t, float>{7, 2.5f}));
  EXPECT_EQ(sampling.logprobs, 3);
  EXPECT_EQ(request.logprobs, 3);
  EXPECT_TRUE(request.options.stop.ignore_eos);
  EXPECT_TRUE(request.options.stream);
  EXPECT_TRUE(request.options.include_usage);
}

TEST(CompletionRequestTest, NullMeansUnsetAndTopKMinusOneMeansAll) {
  const auto request = CompletionRequest::parse(
      body(R"({"prompt": "x", "temperature": null, "max_tokens": null, "stop": "a", "top_k": -1})"));
  EXPECT_FLOAT_EQ(request.options.sampling.temperature, 1.0f);
  EXPECT_EQ(request.options.stop.max_tokens, 16);
  EXPECT_EQ(request.options.stop.stop_strings, std::vector<std::string>{"a"});
  EXPECT_EQ(request.options.sampling.top_k, 0);
}

TEST(CompletionRequestTest, PromptShapes) {
  auto strings = CompletionRequest::parse(body(R"({"prompt": ["a", "b"]})"));
  ASSERT_EQ(strings.prompts.size(), 2u);
  EXPECT_EQ(strings.prompts[1].text, "b");
  auto lists = CompletionRequest::parse(body(R"({"prompt": [[1, 2], [3]]})"));
  ASSERT_EQ(lists.prompts.size(), 2u);
  EXPECT_EQ(lists.prompts[1].token_ids, std::vector<int32_t>{3});
  expect_completion_error(R"({})", "prompt");
  expect_completion_error(R"({"prompt": []})", "prompt");
  expect_completion_error(R"({"prompt": 5})", "prompt");
  expect_completion_error(R"({"prompt": ["a", [1]]})", "prompt");
  expect_completion_error(R"({"prompt": [1, -2]})", "prompt");
  expect_completion_error(R"({"prompt": [1, 2.5]})", "prompt");
  expect_completion_error(R"({"prompt": [[1], []]})", "prompt");
  expect_completion_error(R"({"prompt": [1, 99999999999]})", "prompt");
}

TEST(CompletionRequestTest, WrongTypesAreErrorsNamingTheField) {
  expect_completion_error(R"({"prompt": "x", "temperature": "hot"})", "temperature");
  expect_completion_error(R"({"prompt": "x", "max_tokens": 1.5})", "max_tokens");
  expect_completion_error(R"({"prompt": "x", "max_tokens": "10"})", "max_tokens");
  expect_completion_error(R"({"prompt": "x", "n": true})", "n");
  expect_completion_error(R"({"prompt": "x", "stream": "yes"})", "stream");
  expect_completion_error(R"({"prompt": "x", "stop": 3})", "stop");
  expect_completion_error(R"({"prompt": "x", "stop": ["a", 3]})", "stop");
  expect_completion_error(R"({"prompt": "x", "logit_bias": [1]})", "logit_bias");
  expect_completion_error(R"({"prompt": "x", "logit_bias": {"abc": 1}})", "logit_bias");
  expect_completion_error(R"({"prompt": "x", "model": 3})", "model");
  expect_completion_error(R"({"prompt": "x", "stream": true, "stream_options": {"include_usage": 1}})",
                          "stream_options.include_usage");
  expect_error([] { CompletionRequest::parse(body("[1, 2]")); }, 400, "");
}

TEST(CompletionRequestTest, OutOfRangeValuesAreErrors) {
  expect_completion_error(R"({"prompt": "x", "temperature": 2.5})", "temperature");
  expect_completion_error(R"({"prompt": "x", "temperature": -0.1})", "temperature");
  expect_completion_error(R"({"prompt": "x", "temperature": 1e308})", "temperature");
  expect_completion_error(R"({"prompt": "x", "top_p": 0})", "top_p");
  expect_completion_error(R"({"prompt": "x", "top_p": 1.01})", "top_p");
  expect_completion_error(R"({"prompt": "x", "top_k": -2})", "top_k");
  expect_completion_error(R"({"prompt": "x", "min_p": 1.5})", "min_p");
  expect_completion_error(R"({"prompt": "x", "n": 0})", "n");
  expect_completion_error(R"({"prompt": "x", "n": 1000})", "n");
  expect_completion_error(R"({"prompt": "x", "max_tokens": 0})", "max_tokens");
  expect_completion_error(R"({"prompt": "x", "max_tokens": -1})", "max_tokens");
  expect_completion_error(R"({"prompt": "x", "max_tokens": 99999999999999999999})", "max_tokens");
  expect_completion_error(R"({"prompt": "x", "max_tokens": 18446744073709551615})", "max_tokens");
  expect_completion_error(R"({"prompt": "x", "presence_penalty": 3})", "presence_penalty");
  expect_completion_error(R"({"prompt": "x", "repetition_penalty": 0})", "repetition_penalty");
  expect_completion_error(R"({"prompt": "x", "logprobs": 21})", "logprobs");
  expect_completion_error(R"({"prompt": "x", "logit_bias": {"5": 101}})", "logit_bias");
  expect_completion_error(R"({"prompt": "x", "stop": [""]})", "stop");
}

TEST(CompletionRequestTest, UnsupportedCombinationsAreRefused) {
  expect_completion_error(R"({"prompt": "x", "stream_options": {"include_usage": true}})", "stream_options");
  expect_completion_error(R"({"prompt": "x", "echo": true, "logprobs": 1})", "echo");
  expect_completion_error(R"({"prompt": "x", "suffix": "y"})", "suffix");
  expect_completion_error(R"({"prompt": "x", "best_of": 3})", "best_of");
}

TEST(ChatRequestTest, ReadsMessagesToolsAndChatFields) {
  const auto request = ChatRequest::parse(body(R"({
    "model": "m",
    "messages": [
      {"role": "system", "content": "be brief"},
      {"role": "user", "content": [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}]},
      {"role": "assistant", "content": null, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{\"b\": 1, \"a\": 2}"}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "42"}],
    "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
    "max_tokens": 5, "max_completion_tokens": 9, "logprobs": true, "top_logprobs": 2,
    "chat_template_kwargs": {"enable_thinking": false}})"));
  ASSERT_EQ(request.messages.size(), 4u);
  EXPECT_EQ(request.messages[1]["content"], "one\ntwo");
  EXPECT_TRUE(request.messages[2]["content"].is_null());
  // Arguments become an object, keeping the client's key order.
  const Json& arguments = request.messages[2]["tool_calls"][0]["function"]["arguments"];
  ASSERT_TRUE(arguments.is_object());
  EXPECT_EQ(arguments.dump(), R"({"b":1,"a":2})");
  EXPECT_TRUE(request.tools.is_array());
  EXPECT_TRUE(request.parse_tool_calls);
  EXPECT_EQ(request.options.stop.max_tokens, 9);  // max_completion_tokens wins
  EXPECT_EQ(request.top_logprobs, 2);
  EXPECT_EQ(request.options.sampling.logprobs, 2);
  EXPECT_EQ(request.template_kwargs["enable_thinking"], false);
  EXPECT_TRUE(request.add_generation_prompt);
  const auto input = request.template_input();
  EXPECT_EQ(input.messages.size(), 4u);
  EXPECT_FALSE(input.extra_kwargs.contains("max_tokens"));
  EXPECT_EQ(input.extra_kwargs["enable_thinking"], false);
}

TEST(ChatRequestTest, DefaultsLeaveLengthToTheContext) {
  const auto request = ChatRequest::parse(body(R"({"messages": [{"role": "user", "content": "hi"}]})"));
  EXPECT_FALSE(request.options.stop.max_tokens.has_value());
  EXPECT_FALSE(request.top_logprobs.has_value());
  EXPECT_FALSE(request.options.sampling.logprobs.has_value());
  EXPECT_TRUE(request.tools.is_null());
  EXPECT_FALSE(request.parse_tool_calls);
  const auto logprobs_only = ChatRequest::parse(body(R"({"messages": [{"role": "user", "content": "hi"}], "logprobs": true})"));
  EXPECT_EQ(logprobs_only.top_logprobs, 0);
}

TEST(ChatRequestTest, ToolChoice) {
  const char* with_tools = R"({"messages": [{"role": "user", "content": "hi"}],
    "tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "none"})";
  EXPECT_FALSE(ChatRequest::parse(body(with_tools)).parse_tool_calls);
  const auto required = ChatRequest::parse(body(R"({"messages": [{"role": "user", "content": "hi"}],
    "tool_choice": "required", "tools": [{"type": "function", "function": {"name": "f"}}]})"));
  EXPECT_TRUE(required.force_tool_call);
  expect_chat_error(R"({"messages": [{"role": "user", "content": "hi"}], "tool_choice": "required"})", "tool_choice");
  expect_chat_error(R"({"messages": [{"role": "user", "content": "hi"}], "tool_choice": "sometimes"})", "tool_choice");
  expect_chat_error(R"({"messages": [{"role": "user", "content": "hi"}], "tool_choice": {"type": "function",
    "function": {"name": "f"}}})", "tool_choice");
  expect_chat_error(R"({"messages": [{"role": "user", "content": "hi"}], "tool_choice": {"type": "function",
    "function": {"name": "g"}}, "tools": [{"type": "function", "function": {"name": "f"}}]})",
                    "tool_choice.function.name");
}

TEST(ChatRequestTest, BadRequestsNameTheField) {
  expect_chat_error(R"({})", "messages");
  expect_chat_error(R"({"messages": []})", "messages");
  expect_chat_error(R"({"messages": "hi"})", "messages");
  expect_chat_error(R"({"messages": [3]})", "messages[0]");
  expect_chat_error(R"({"messages": [{"content": "hi"}]})", "messages[0].role");
  expect_chat_error(R"({"messages": [{"role": "wizard", "content": "hi"}]})", "messages[0].role");
  expect_chat_error(R"({"messages": [{"role": "user", "content": 5}]})", "messages[0].content");
  expect_chat_error(R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})",
                    "messages[0].content[0].type");
  expect_chat_error(R"({"messages": [{"role": "user", "content": "hi"}], "tools": {}})", "tools");
  expect_chat_error(R"({"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function"}]})",
                    "tools[0].function");
  expect_chat_error(R"({"messages": [{"role": "user", "content": "hi"}], "top_logprobs": 2})", "top_logprobs");
  expect_chat_error(R"({"messages": [{"role": "user", "content": "hi"}], "logprobs": true, "top_logprobs": 21})",
                    "top_logprobs");
  expect_chat_error(R"({"messages": [{"role": "user", "content": "hi"}], "logprobs": 1})", "logprobs");
  expect_chat_error(R"({"messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 0})",
                    "max_completion_tokens");
  expect_chat_error(R"({"messages": [{"role": "user", "content": "hi"}], "chat_template_kwargs": []})",
                    "chat_template_kwargs");
  expect_chat_error(R"({"messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "yaml"}})",
                    "response_format.type");
}

TEST(ChatRequestTest, JsonTextNestedPastTheLimitIsRefusedNamingTheField) {
  // JSON inside a string escapes the body's own nesting check; parsed, it was dumped and converted per level.
  const std::string deep = std::string(74'000, '[') + std::string(74'000, ']');
  const Json user = {{"role", "user"}, {"content", "hi"}};
  const Json call = {{"type", "function"}, {"function", {{"name", "f"}, {"arguments", "{\"x\": " + deep + "}"}}}};
  const Json with_call = {{"messages", {user, {{"role", "assistant"}, {"tool_calls", {call}}}}}};
  expect_error([&] { ChatRequest::parse(with_call); }, 400, "messages[1].tool_calls[0].function.arguments");
  const Json with_schema = {{"messages", {user}}, {"guided_json", "{\"x\": " + deep + "}"}};
  expect_error([&] { ChatRequest::parse(with_schema); }, 400, "guided_json");
  const Json with_format = {
      {"messages", {user}},
      {"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "s"}, {"schema", "{\"x\": " + deep + "}"}}}}}};
  expect_error([&] { ChatRequest::parse(with_format); }, 400, "response_format.json_schema.schema");
}

// Objects of vocabulary-sized key counts: nlohmann::ordered_json's parser searched the object once per key, so a
// 2 MB body of 160,000 keys took about 45 s and a logit_bias over Qwen3's 151,936 tokens about 40 s.
TEST(RequestBodyTest, ObjectsWithManyKeysParseInLinearTime) {
  constexpr int kNumTokens = 151'936;
  std::string text = R"({"prompt": "hi", "logit_bias": {)";
  for (int i = 0; i < kNumTokens; ++i) text += (i ? ",\"" : "\"") + std::to_string(i) + "\": " + std::to_string(i % 100);
  text += "}";
  for (int i = 0; i < 160'000; ++i) text += ",\"unknown" + std::to_string(i) + "\": " + std::to_string(i);
  text += "}";
  const auto start = std::chrono::steady_clock::now();
  const auto request = CompletionRequest::parse(parse_request_body(text));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const auto& bias = request.options.sampling.logit_bias;
  ASSERT_EQ(bias.size(), static_cast<size_t>(kNumTokens));
  EXPECT_EQ(bias.back().first, kNumTokens - 1);  // in the client's order
  EXPECT_FLOAT_EQ(bias.back().second, static_cast<float>((kNumTokens - 1) % 100));
  EXPECT_LT(seconds, 2.0) << text.size() << " bytes";
}

TEST(RequestBodyTest, MalformedBodiesAre400) {
  expect_error([] { parse_request_body(""); }, 400, "");
  expect_error([] { parse_request_body("{\"prompt\": "); }, 400, "");
  expect_error([] { parse_request_body("{\"prompt\": \"a\"} trailing"); }, 400, "");
  expect_error([] { parse_request_body("{\"prompt\": \"\xff\xfe\"}"); }, 400, "");  // invalid UTF-8
  expect_error([] { parse_request_body(std::string(100000, '[') + std::string(100000, ']')); }, 400, "");
  EXPECT_TRUE(parse_request_body(R"({"a": [[["deep enough"]]]})").is_object());
}

TEST(RequestBodyTest, NestingDepthIgnoresBracketsInStrings) {
  EXPECT_EQ(json_nesting_depth(R"({"a": [1, {"b": 2}]})", 100), 3);
  EXPECT_EQ(json_nesting_depth(R"({"a": "[[[[{{{{\"[["})", 100), 1);
  EXPECT_EQ(json_nesting_depth(R"("just a string")", 100), 0);
  EXPECT_GT(json_nesting_depth(std::string(1000, '['), 10), 10);
}

TEST(ApiErrorTest, HasOpenAiShape) {
  const ApiError error(404, "no such model", "model", "model_not_found");
  const auto json = error.to_json();
  EXPECT_EQ(json["error"]["message"], "no such model");
  EXPECT_EQ(json["error"]["type"], "invalid_request_error");
  EXPECT_EQ(json["error"]["param"], "model");
  EXPECT_EQ(json["error"]["code"], "model_not_found");
  const auto server_error = ApiError(500, "boom").to_json();
  EXPECT_EQ(server_error["error"]["type"], "server_error");
  EXPECT_TRUE(server_error["error"]["param"].is_null());
  EXPECT_TRUE(server_error["error"]["code"].is_null());
}

}  // namespace
}  // namespace tern::server
