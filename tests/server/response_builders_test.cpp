// Response builders: engine outputs -> OpenAI JSON bodies and SSE streams. A streamed response must carry the same
// choices as the whole one (what OpenAI clients rebuild from the deltas), and both must have OpenAI's shape.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "fixtures.h"
#include "server/chat_response.h"
#include "server/completion_response.h"
#include "server/sse.h"
#include "tokenizer/tokenizer.h"

namespace tern::server {
namespace {

const Tokenizer& llama3_tokenizer() {
  static const Tokenizer tokenizer = Tokenizer::load(testing::fixtures_dir() / "tokenizers" / "llama3");
  return tokenizer;
}

ResponseContext context(bool stream, int32_t n = 1, size_t num_prompts = 1, bool include_usage = false) {
  ResponseContext c;
  c.id = "cmpl-test";
  c.model_name = "tiny";
  c.created = 1700000000;
  c.stream = stream;
  c.include_usage = include_usage;
  c.n = n;
  c.num_prompts = num_prompts;
  return c;
}

RequestOutput output(int32_t index, std::string text, std::vector<int32_t> ids, Usage usage,
                     std::optional<FinishReason> reason = std::nullopt, bool request_finished = false) {
  RequestOutput o;
  o.index = index;
  o.text = std::move(text);
  o.token_ids = std::move(ids);
  o.usage = usage;
  o.finish_reason = reason;
  o.request_finished = request_finished;
  return o;
}

// Splits an SSE body into its events' data; checks the framing on the way.
std::vector<std::string> sse_data(const std::string& body) {
  std::vector<std::string> events;
  size_t start = 0;
  while (start < body.size()) {
    const size_t end = body.find("\n\n", start);
    EXPECT_NE(end, std::string::npos) << "unterminated event";
    if (end == std::string::npos) break;
    const std::string event = body.substr(start, end - start);
    EXPECT_EQ(event.rfind("data: ", 0), 0u) << event;
    EXPECT_EQ(event.find('\n'), std::string::npos) << "one data line per event";
    events.push_back(event.substr(6));
    start = end + 2;
  }
  return events;
}

TEST(SseTest, FramesOneLinePerEvent) {
  EXPECT_EQ(sse_event(Json{{"a", "x\ny"}}), "data: {\"a\":\"x\\ny\"}\n\n");
  EXPECT_EQ(sse_done(), "data: [DONE]\n\n");
  // Invalid UTF-8 from a broken detokenization must not make the stream unserializable.
  EXPECT_NO_THROW(sse_event(Json{{"a", std::string("\xff")}}));
}

TEST(CompletionResponseTest, WholeResponseOrdersChoicesByPromptThenSequence) {
  CompletionResponse response(context(false, 2, 2), {}, false, llama3_tokenizer());
  EXPECT_EQ(response.start(), "");
  // Prompt 1 finishes first; outputs interleave.
  EXPECT_EQ(response.on_output(1, output(1, "b1", {5}, {3, 0, 1})), "");
  EXPECT_EQ(response.on_output(0, output(0, "a0", {5}, {4, 2, 1})), "");
  response.on_output(1, output(0, "b0", {5, 6}, {3, 0, 3}, FinishReason::kLength, false));
  response.on_output(1, output(1, "!", {7}, {3, 0, 4}, FinishReason::kStop, true));
  response.on_output(0, output(1, "a1", {8}, {4, 2, 2}, FinishReason::kLength, false));
  response.on_output(0, output(0, "+", {9}, {4, 2, 3}, FinishReason::kLength, true));
  const HttpReply reply = response.finish();
  EXPECT_EQ(reply.status, 200);
  const Json json = Json::parse(reply.body);
  EXPECT_EQ(json["object"], "text_completion");
  EXPECT_EQ(json["id"], "cmpl-test");
  EXPECT_EQ(json["model"], "tiny");
  ASSERT_EQ(json["choices"].size(), 4u);
  const std::vector<std::string> texts = {"a0+", "a1", "b0", "b1!"};
  const std::vector<std::string> reasons = {"length", "length", "length", "stop"};
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(json["choices"][i]["index"], i);
    EXPECT_EQ(json["choices"][i]["text"], texts[i]);
    EXPECT_EQ(json["choices"][i]["finish_reason"], reasons[i]);
    EXPECT_TRUE(json["choices"][i]["logprobs"].is_null());
  }
  EXPECT_EQ(json["usage"]["prompt_tokens"], 7);
  EXPECT_EQ(json["usage"]["completion_tokens"], 7);
  EXPECT_EQ(json["usage"]["total_tokens"], 14);
  EXPECT_EQ(json["usage"]["prompt_tokens_details"]["cached_tokens"], 2);
}

// Speculative decoding: the prompts' drafts add up in usage, as OpenAI's prediction token counts and vLLM's
// spec-decode measures; a response without drafts has neither.
TEST(CompletionResponseTest, UsageReportsTheRequestsDrafts) {
  CompletionResponse response(context(false, 1, 2), {}, false, llama3_tokenizer());
  response.start();
  response.on_output(0, output(0, "a", {5}, {.prompt_tokens = 3, .completion_tokens = 7, .spec_drafts = 2,
                                             .spec_draft_tokens = 6, .spec_accepted_tokens = 4},
                               FinishReason::kLength, true));
  response.on_output(1, output(0, "b", {6}, {.prompt_tokens = 3, .completion_tokens = 4, .spec_drafts = 2,
                                             .spec_draft_tokens = 6, .spec_accepted_tokens = 0},
                               FinishReason::kLength, true));
  const Json usage = Json::parse(response.finish().body)["usage"];
  EXPECT_EQ(usage["completion_tokens_details"]["accepted_prediction_tokens"], 4);
  EXPECT_EQ(usage["completion_tokens_details"]["rejected_prediction_tokens"], 8);
  EXPECT_EQ(usage["speculative_decoding"]["num_drafts"], 4);
  EXPECT_EQ(usage["speculative_decoding"]["num_draft_tokens"], 12);
  EXPECT_EQ(usage["speculative_decoding"]["num_accepted_tokens"], 4);
  EXPECT_DOUBLE_EQ(usage["speculative_decoding"]["acceptance_rate"].get<double>(), 4.0 / 12.0);
  EXPECT_DOUBLE_EQ(usage["speculative_decoding"]["mean_acceptance_length"].get<double>(), 2.0);

  CompletionResponse plain(context(false, 1, 1), {}, false, llama3_tokenizer());
  plain.start();
  plain.on_output(0, output(0, "a", {5}, {3, 0, 1}, FinishReason::kLength, true));
  const Json plain_usage = Json::parse(plain.finish().body)["usage"];
  EXPECT_FALSE(plain_usage.contains("completion_tokens_details"));
  EXPECT_FALSE(plain_usage.contains("speculative_decoding"));
}

TEST(CompletionResponseTest, StreamCarriesTheSameTextEchoAndUsage) {
  CompletionResponse response(context(true, 1, 1, true), {"Say:"}, false, llama3_tokenizer());
  std::string body = response.start();
  body += response.on_output(0, output(0, " hel", {1}, {2, 0, 1}));
  body += response.on_output(0, output(0, "", {2}, {2, 0, 2}));  // held back by the detokenizer: no chunk
  body += response.on_output(0, output(0, "lo", {3}, {2, 0, 3}, FinishReason::kStop, true));
  const HttpReply rest = response.finish();
  EXPECT_EQ(rest.content_type, "text/event-stream");
  body += rest.body;
  const auto events = sse_data(body);
  ASSERT_EQ(events.size(), 5u);  // echo, two deltas, usage, [DONE]
  EXPECT_EQ(events.back(), "[DONE]");
  std::string text;
  for (size_t i = 0; i + 2 < events.size(); ++i) {
    const Json chunk = Json::parse(events[i]);
    EXPECT_EQ(chunk["object"], "text_completion");
    EXPECT_TRUE(chunk.contains("usage") && chunk["usage"].is_null());
    text += chunk["choices"][0]["text"].get<std::string>();
  }
  EXPECT_EQ(text, "Say: hello");
  EXPECT_EQ(Json::parse(events[2])["choices"][0]["finish_reason"], "stop");
  const Json usage_chunk = Json::parse(events[3]);
  EXPECT_TRUE(usage_chunk["choices"].empty());
  EXPECT_EQ(usage_chunk["usage"]["completion_tokens"], 3);
  EXPECT_EQ(usage_chunk["usage"]["total_tokens"], 5);
}

TEST(CompletionResponseTest, LogprobsSpellTokensAsTheirText) {
  // Hugging Face's own decoding of these ids (the tokenizer golden) is the reference for the token texts.
  const Json golden = testing::read_json(testing::fixtures_dir() / "tokenizers" / "llama3" / "encode_golden.json");
  const Json& cases = golden["cases"];
  const Json* chosen = nullptr;
  for (const auto& c : cases) {
    const std::string text = c["text"];
    bool ascii = !text.empty();
    for (unsigned char ch : text) ascii = ascii && ch < 0x80;
    if (ascii && c["ids"].size() >= 3) {
      chosen = &c;
      break;
    }
  }
  ASSERT_NE(chosen, nullptr);
  std::vector<TokenLogprob> logprobs;
  std::vector<int32_t> ids;
  for (const auto& id : (*chosen)["ids"]) {
    ids.push_back(id.get<int32_t>());
    logprobs.push_back({id.get<int32_t>(), -0.5f, {{id.get<int32_t>(), -0.5f}, {0, -std::numeric_limits<float>::infinity()}}});
  }
  CompletionResponse response(context(false), {}, true, llama3_tokenizer());
  RequestOutput o = output(0, (*chosen)["decoded"], ids, {1, 0, static_cast<int32_t>(ids.size())}, FinishReason::kLength, true);
  o.logprobs = logprobs;
  response.on_output(0, o);
  const Json json = Json::parse(response.finish().body);
  const Json& lp = json["choices"][0]["logprobs"];
  std::string joined;
  int64_t expected_offset = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    EXPECT_EQ(lp["text_offset"][i], expected_offset);
    joined += lp["tokens"][i].get<std::string>();
    expected_offset += static_cast<int64_t>(lp["tokens"][i].get<std::string>().size());
    EXPECT_DOUBLE_EQ(lp["token_logprobs"][i].get<double>(), -0.5);
    EXPECT_TRUE(lp["top_logprobs"][i].contains(lp["tokens"][i].get<std::string>()));
    for (const auto& [token, value] : lp["top_logprobs"][i].items()) EXPECT_TRUE(std::isfinite(value.get<double>()));
  }
  EXPECT_EQ(joined, (*chosen)["decoded"].get<std::string>());
}

TEST(CompletionResponseTest, EngineErrorsBecome500OrAnErrorEvent) {
  RequestOutput failed = output(0, "", {}, {3, 0, 0}, FinishReason::kAbort, true);
  failed.error = "out of memory";
  CompletionResponse whole(context(false), {}, false, llama3_tokenizer());
  whole.on_output(0, failed);
  const HttpReply reply = whole.finish();
  EXPECT_EQ(reply.status, 500);
  const Json error = Json::parse(reply.body);
  EXPECT_EQ(error["error"]["type"], "server_error");
  EXPECT_NE(error["error"]["message"].get<std::string>().find("out of memory"), std::string::npos);

  CompletionResponse streamed(context(true), {}, false, llama3_tokenizer());
  std::string body = streamed.on_output(0, failed);
  body += streamed.finish().body;
  const auto events = sse_data(body);
  ASSERT_GE(events.size(), 2u);
  EXPECT_EQ(events.back(), "[DONE]");
  EXPECT_TRUE(Json::parse(events[events.size() - 2]).contains("error"));
}

// Rebuilds a chat message from stream chunks the way the openai client does.
struct RebuiltMessage {
  std::string role, content, reasoning;
  std::map<int, Json> tool_calls;
  std::string finish_reason;
};

RebuiltMessage rebuild(const std::vector<std::string>& events) {
  RebuiltMessage message;
  for (const auto& event : events) {
    if (event == "[DONE]") continue;
    const Json chunk = Json::parse(event);
    EXPECT_EQ(chunk["object"], "chat.completion.chunk");
    for (const auto& choice : chunk["choices"]) {
      const Json& delta = choice["delta"];
      if (delta.contains("role")) message.role = delta["role"];
      if (delta.contains("content")) message.content += delta["content"].get<std::string>();
      if (delta.contains("reasoning_content")) message.reasoning += delta["reasoning_content"].get<std::string>();
      if (delta.contains("tool_calls")) {
        for (const auto& call : delta["tool_calls"]) {
          Json& slot = message.tool_calls[call["index"].get<int>()];
          if (call.contains("id")) slot["id"] = call["id"];
          if (call["function"].contains("name")) slot["name"] = call["function"]["name"];
          slot["arguments"] = slot.value("arguments", std::string()) + call["function"]["arguments"].get<std::string>();
        }
      }
      if (!choice["finish_reason"].is_null()) message.finish_reason = choice["finish_reason"];
    }
  }
  return message;
}

chat::ChatOutputOptions hermes_with_reasoning() {
  chat::ChatOutputOptions options;
  options.reasoning_parser = "qwen3";
  options.tool_call_parser = "hermes";
  options.tool_call_id_prefix = "t";
  return options;
}

TEST(ChatResponseTest, StreamAndWholeGiveTheSameMessageWithToolCalls) {
  const std::string text =
      "<think>user wants weather</think>Checking.<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
      "{\"city\": \"Paris\"}}\n</tool_call>";
  ChatResponse whole(context(false), hermes_with_reasoning(), false, llama3_tokenizer());
  whole.on_output(0, output(0, text, {1, 2, 3}, {10, 0, 3}, FinishReason::kStop, true));
  const Json json = Json::parse(whole.finish().body);
  EXPECT_EQ(json["object"], "chat.completion");
  const Json& choice = json["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls");
  EXPECT_EQ(choice["message"]["role"], "assistant");
  EXPECT_EQ(choice["message"]["reasoning_content"], "user wants weather");
  EXPECT_EQ(choice["message"]["content"], "Checking.");
  ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u);
  const Json& call = choice["message"]["tool_calls"][0];
  EXPECT_EQ(call["type"], "function");
  EXPECT_EQ(call["function"]["name"], "get_weather");
  EXPECT_EQ(Json::parse(call["function"]["arguments"].get<std::string>()), Json::parse(R"({"city": "Paris"})"));

  ChatResponse streamed(context(true), hermes_with_reasoning(), false, llama3_tokenizer());
  std::string body = streamed.start();
  // Three-character deltas split every tag somewhere in the middle.
  for (size_t i = 0; i < text.size(); i += 3) {
    const bool last = i + 3 >= text.size();
    body += streamed.on_output(0, output(0, text.substr(i, 3), {1}, {10, 0, static_cast<int32_t>(i / 3 + 1)},
                                         last ? std::optional(FinishReason::kStop) : std::nullopt, last));
  }
  body += streamed.finish().body;
  const auto events = sse_data(body);
  EXPECT_EQ(events.back(), "[DONE]");
  const Json first = Json::parse(events.front());
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  const RebuiltMessage rebuilt = rebuild(events);
  EXPECT_EQ(rebuilt.role, "assistant");
  EXPECT_EQ(rebuilt.reasoning, "user wants weather");
  EXPECT_EQ(rebuilt.content, "Checking.");
  EXPECT_EQ(rebuilt.finish_reason, "tool_calls");
  ASSERT_EQ(rebuilt.tool_calls.size(), 1u);
  EXPECT_EQ(rebuilt.tool_calls.at(0)["name"], "get_weather");
  EXPECT_EQ(Json::parse(rebuilt.tool_calls.at(0)["arguments"].get<std::string>()), Json::parse(R"({"city": "Paris"})"));
}

TEST(ChatResponseTest, WithoutToolParsingTagsStayContent) {
  chat::ChatOutputOptions options;  // tool_choice "none" or no tools
  const std::string text = "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>";
  ChatResponse whole(context(false), options, false, llama3_tokenizer());
  whole.on_output(0, output(0, text, {1}, {2, 0, 1}, FinishReason::kStop, true));
  const Json json = Json::parse(whole.finish().body);
  EXPECT_EQ(json["choices"][0]["message"]["content"], text);
  EXPECT_EQ(json["choices"][0]["finish_reason"], "stop");
  EXPECT_FALSE(json["choices"][0]["message"].contains("tool_calls"));
}

TEST(ChatResponseTest, LogprobsCarryTokenBytes) {
  const Tokenizer& tokenizer = llama3_tokenizer();
  const std::vector<int32_t> ids = tokenizer.encode("Hello world", false);
  ASSERT_GE(ids.size(), 2u);
  RequestOutput o = output(0, "Hello world", ids, {1, 0, static_cast<int32_t>(ids.size())}, FinishReason::kLength, true);
  for (int32_t id : ids) o.logprobs.push_back({id, -1.0f, {{id, -1.0f}}});
  ChatResponse whole(context(false), {}, true, tokenizer);
  whole.on_output(0, o);
  const Json json = Json::parse(whole.finish().body);
  const Json& content = json["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), ids.size());
  std::string from_bytes;
  for (const auto& entry : content) {
    for (const auto& byte : entry["bytes"]) from_bytes.push_back(static_cast<char>(byte.get<int>()));
    ASSERT_EQ(entry["top_logprobs"].size(), 1u);
    EXPECT_EQ(entry["top_logprobs"][0]["token"], entry["token"]);
  }
  EXPECT_EQ(from_bytes, "Hello world");
}

TEST(ChatResponseTest, StreamWithSeveralChoicesAndUsage) {
  ChatResponse streamed(context(true, 2, 1, true), {}, false, llama3_tokenizer());
  std::string body = streamed.start();
  body += streamed.on_output(0, output(1, "B", {1}, {4, 0, 1}));
  body += streamed.on_output(0, output(0, "A", {1}, {4, 0, 2}, FinishReason::kLength, false));
  body += streamed.on_output(0, output(1, "b", {1}, {4, 0, 3}, FinishReason::kStop, true));
  body += streamed.finish().body;
  const auto events = sse_data(body);
  std::map<int, std::string> contents;
  std::map<int, std::string> reasons;
  for (const auto& event : events) {
    if (event == "[DONE]") continue;
    const Json chunk = Json::parse(event);
    for (const auto& choice : chunk["choices"]) {
      const int index = choice["index"];
      if (choice["delta"].contains("content")) contents[index] += choice["delta"]["content"].get<std::string>();
      if (!choice["finish_reason"].is_null()) reasons[index] = choice["finish_reason"];
    }
  }
  EXPECT_EQ(contents[0], "A");
  EXPECT_EQ(contents[1], "Bb");
  EXPECT_EQ(reasons[0], "length");
  EXPECT_EQ(reasons[1], "stop");
  const Json usage_chunk = Json::parse(events[events.size() - 2]);
  EXPECT_EQ(usage_chunk["usage"]["completion_tokens"], 3);
  EXPECT_EQ(usage_chunk["usage"]["prompt_tokens"], 4);
}

// A drain that runs out of time cuts streams short: every choice still running gets a last chunk with finish_reason
// "abort", the ones that ended keep theirs, and the stream still ends with the usage chunk and [DONE].
TEST(ChatResponseTest, AbortEndsTheRunningChoicesAndTheStream) {
  ChatResponse streamed(context(true, 3, 1, true), hermes_with_reasoning(), false, llama3_tokenizer());
  std::string body = streamed.start();
  body += streamed.on_output(0, output(0, "<think>hm", {1, 2}, {4, 0, 2}));
  body += streamed.on_output(0, output(1, "done", {1}, {4, 0, 3}, FinishReason::kStop, false));
  body += streamed.on_output(0, output(2, "half", {1}, {4, 0, 4}));
  const HttpReply rest = streamed.abort();
  EXPECT_EQ(rest.status, 200);
  body += rest.body;
  const auto events = sse_data(body);
  ASSERT_GE(events.size(), 2u);
  EXPECT_EQ(events.back(), "[DONE]");
  EXPECT_EQ(Json::parse(events[events.size() - 2])["usage"]["completion_tokens"], 4);
  std::map<int, std::string> reasons;
  std::map<int, int> num_finishes;
  for (size_t i = 0; i + 2 < events.size(); ++i) {
    const Json chunk = Json::parse(events[i]);
    for (const auto& choice : chunk["choices"]) {
      if (choice["finish_reason"].is_null()) continue;
      reasons[choice["index"]] = choice["finish_reason"];
      ++num_finishes[choice["index"]];
    }
  }
  EXPECT_EQ(reasons, (std::map<int, std::string>{{0, "abort"}, {1, "stop"}, {2, "abort"}}));
  EXPECT_EQ(num_finishes, (std::map<int, int>{{0, 1}, {1, 1}, {2, 1}})) << "one finish per choice";
  // What the reasoning parser held back when the stream was cut still reaches the client.
  const RebuiltMessage message = rebuild(events);
  EXPECT_NE((message.reasoning + message.content).find("hm"), std::string::npos);
}

TEST(CompletionResponseTest, AbortIsA503WhenNotStreaming) {
  CompletionResponse whole(context(false), {}, false, llama3_tokenizer());
  whole.on_output(0, output(0, "partial", {1}, {3, 0, 1}));
  const HttpReply reply = whole.abort();
  EXPECT_EQ(reply.status, 503);
  EXPECT_EQ(Json::parse(reply.body)["error"]["code"], "server_shutting_down");
}

}  // namespace
}  // namespace tern::server
