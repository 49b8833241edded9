#include "chat/chat_output_parser.h"

#include <fmt/format.h>

#include <random>

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

ChatOutputOptions ChatOutputOptions::for_template(std::string_view template_source, std::string_view prompt) {
  ChatOutputOptions options;
  ReasoningTags tags;
  options.parse_reasoning = template_source.find(tags.start) != std::string_view::npos;
  options.starts_in_reasoning = options.parse_reasoning && ReasoningParser::prompt_opens_reasoning(prompt, tags);
  if (template_source.find("<tool_call>") != std::string_view::npos) {
    options.tool_call_format = ToolCallFormat::kHermes;
  } else if (template_source.find("<|python_tag|>") != std::string_view::npos ||
             template_source.find("\"parameters\": dictionary of argument name and its value") !=
                 std::string_view::npos) {
    options.tool_call_format = ToolCallFormat::kLlama3Json;
  }
  return options;
}

ChatOutputParser::ChatOutputParser(ChatOutputOptions options) : options_(std::move(options)) {
  if (options_.parse_reasoning) reasoning_ = std::make_unique<ReasoningParser>(options_.starts_in_reasoning);
  tool_calls_ = make_tool_call_parser(options_.tool_call_format);
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
