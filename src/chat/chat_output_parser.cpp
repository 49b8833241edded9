#include "chat/chat_output_parser.h"

#include <fmt/format.h>

#include <random>

#include "chat/output_parser_registry.h"
#include "core/error.h"

namespace tern::chat {

void ChatMessage::append(const ChatDelta& delta) {
  reasoning_content += delta.reasoning_content;
  content += delta.content;
  for (const auto& call : delta.tool_calls) {
    if (static_cast<size_t>(call.index) >= tool_calls.size()) tool_calls.resize(static_cast<size_t>(call.index) + 1);
    ToolCall& target = tool_calls[static_cast<size_t>(call.index)];
    if (!call.id.empty()) target.id = call.id;
    target.name += call.name;
    target.arguments += call.arguments;
  }
}

nlohmann::ordered_json ChatMessage::to_openai_json() const {
  nlohmann::ordered_json message;
  message["role"] = "assistant";
  if (content.empty() && !tool_calls.empty()) {
    message["content"] = nullptr;
  } else {
    message["content"] = content;
  }
  if (!reasoning_content.empty()) message["reasoning_content"] = reasoning_content;
  if (!tool_calls.empty()) {
    auto calls = nlohmann::ordered_json::array();
    for (const auto& call : tool_calls) {
      calls.push_back({{"id", call.id},
                       {"type", "function"},
                       {"function", {{"name", call.name}, {"arguments", call.arguments}}}});
    }
    message["tool_calls"] = std::move(calls);
  }
  return message;
}

namespace {

bool contains(std::string_view text, std::string_view part) { return text.find(part) != std::string_view::npos; }

std::string default_tool_call_parser(std::string_view source) {
  if (contains(source, "<|channel|>")) return "openai";
  if (contains(source, "<｜tool▁call▁begin｜>")) return contains(source, "```json") ? "deepseek_v3" : "deepseek_v31";
  if (contains(source, "<|tool_calls_section_begin|>")) return "kimi_k2";
  if (contains(source, "<arg_key>")) return "glm45";
  if (contains(source, "<function=") && contains(source, "<parameter=")) return "qwen3_coder";
  if (contains(source, "<tool_call>")) return "hermes";
  if (contains(source, "[TOOL_CALLS]")) return "mistral";
  if (contains(source, "<|python_tag|>") || contains(source, "\"parameters\": dictionary of argument name and its value")) {
    return "llama3_json";
  }
  return "";
}

std::string default_reasoning_parser(std::string_view source) {
  if (contains(source, "<|channel|>")) return "gpt_oss";
  if (!contains(source, "<think>")) return "";
  if (contains(source, "<|tool_calls_section_begin|>")) return "kimi_k2";
  if (contains(source, "<｜Assistant｜>")) return "deepseek_v3";
  return "qwen3";
}

}  // namespace

ChatOutputOptions ChatOutputOptions::for_template_source(std::string_view template_source, std::string_view prompt) {
  ChatOutputOptions options;
  options.reasoning_parser = default_reasoning_parser(template_source);
  options.tool_call_parser = default_tool_call_parser(template_source);
  options.prompt_opens_think = ThinkTagReasoningParser::prompt_opens_reasoning(prompt);
  return options;
}

ChatOutputOptions ChatOutputOptions::for_chat_template(const ChatTemplate& chat_template, std::string_view prompt) {
  const std::optional<DeepSeekEncoding> encoding = chat_template.deepseek_encoding();
  if (!encoding) return for_template_source(chat_template.source(), prompt);
  ChatOutputOptions options;
  options.reasoning_parser = "deepseek_v3";
  options.tool_call_parser = *encoding == DeepSeekEncoding::kV32 ? "deepseek_v32" : "deepseek_v4";
  options.prompt_opens_think = ThinkTagReasoningParser::prompt_opens_reasoning(prompt);
  return options;
}

bool ChatOutputOptions::keeps_special_tokens() const {
  const ReasoningParserEntry* reasoning = find_reasoning_parser(reasoning_parser);
  const ToolCallParserEntry* tool_calls = find_tool_call_parser(tool_call_parser);
  return (reasoning && reasoning->keeps_special_tokens) || (tool_calls && tool_calls->keeps_special_tokens);
}

ChatOutputParser::ChatOutputParser(ChatOutputOptions options) : options_(std::move(options)) {
  if (!options_.reasoning_parser.empty()) {
    const ReasoningParserEntry* entry = find_reasoning_parser(options_.reasoning_parser);
    if (!entry) {
      fail("reasoning parser '{}' is unknown; the reasoning parsers are {}", options_.reasoning_parser,
           reasoning_parser_names());
    }
    reasoning_ = entry->make(options_.prompt_opens_think);
  }
  if (options_.tool_call_parser.empty()) {
    tool_calls_ = std::make_unique<PlainContentParser>();
  } else {
    const ToolCallParserEntry* entry = find_tool_call_parser(options_.tool_call_parser);
    if (!entry) {
      fail("tool-call parser '{}' is unknown; the tool-call parsers are {}", options_.tool_call_parser,
           tool_call_parser_names());
    }
    tool_calls_ = entry->make(options_.tool_schemas);
  }
  if (options_.tool_call_id_prefix.empty()) {
    std::random_device device;
    options_.tool_call_id_prefix = fmt::format("{:08x}{:08x}_", device(), device());
  }
}

void ChatOutputParser::add_content(ChatDelta& delta, const ToolCallParseDelta& parsed) {
  delta.content += parsed.content;
  for (const auto& call : parsed.calls) {
    int index = num_tool_calls_++;
    delta.tool_calls.push_back(
        ToolCallDelta{index, fmt::format("call_{}{}", options_.tool_call_id_prefix, index), call.name, call.arguments});
  }
}

ChatDelta ChatOutputParser::feed(std::string_view text) {
  ChatDelta delta;
  if (!reasoning_) {
    add_content(delta, tool_calls_->feed(text));
    return delta;
  }
  ReasoningDelta split = reasoning_->feed(text);
  delta.reasoning_content = std::move(split.reasoning);
  if (!split.content.empty()) add_content(delta, tool_calls_->feed(split.content));
  return delta;
}

ChatDelta ChatOutputParser::flush() {
  ChatDelta delta;
  if (reasoning_) {
    ReasoningDelta split = reasoning_->flush();
    delta.reasoning_content = std::move(split.reasoning);
    if (!split.content.empty()) add_content(delta, tool_calls_->feed(split.content));
  }
  add_content(delta, tool_calls_->flush());
  return delta;
}

ChatMessage ChatOutputParser::parse(std::string_view text, const ChatOutputOptions& options) {
  ChatOutputParser parser(options);
  ChatMessage message;
  message.append(parser.feed(text));
  message.append(parser.flush());
  return message;
}

}  // namespace tern::chat
