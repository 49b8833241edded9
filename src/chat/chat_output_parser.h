#pragma once
// Turns the text a chat model generates into an OpenAI assistant message: reasoning_content, content and
// tool_calls. Works on a stream (text deltas in, message deltas out, like vLLM's streaming parsers) and on a
// whole output; both give the same message, since the whole output is parsed as one delta.
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "chat/chat_template.h"
#include "chat/reasoning_parser.h"
#include "chat/tool_call_parser.h"

namespace tern::chat {

// One tool call of a streamed delta. This parser reports each call whole (id, name and all of its arguments in
// one delta), which OpenAI clients accumulate the same way as argument fragments.
struct ToolCallDelta {
  int index = 0;
  std::string id;
  std::string name;
  std::string arguments;  // a fragment of the arguments JSON text
};

struct ChatDelta {
  std::string reasoning_content;
  std::string content;
  std::vector<ToolCallDelta> tool_calls;

  bool empty() const { return reasoning_content.empty() && content.empty() && tool_calls.empty(); }
};

struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments;
};

struct ChatMessage {
  std::string reasoning_content;
  std::string content;
  std::vector<ToolCall> tool_calls;

  // Adds a streamed delta, as an OpenAI client accumulates them.
  void append(const ChatDelta& delta);
  // {"role": "assistant", "content": ..., "reasoning_content": ..., "tool_calls": [...]}; content is null when
  // empty and there are tool calls, reasoning_content and tool_calls are left out when empty.
  nlohmann::ordered_json to_openai_json() const;
};

struct ChatOutputOptions {
  std::string reasoning_parser;  // a name from output_parser_registry.h; empty: no reasoning is split off
  std::string tool_call_parser;  // a name from output_parser_registry.h; empty: no tool calls are parsed
  bool prompt_opens_think = false;  // the prompt ends inside <think> (ThinkTagReasoningParser::prompt_opens_reasoning)
  std::string tool_call_id_prefix;  // ids are "call_<prefix><index>"; empty picks a random prefix
  ToolParameterSchemas tool_schemas;  // the request's tools (tool_parameter_schemas); empty: not known

  // The parsers whose markers a chat template writes (harmony channels, <tool_call>, DeepSeek's tool tokens...), as
  // the default for its model family, and whether `prompt`, rendered with it, leaves a <think> block open.
  static ChatOutputOptions for_template_source(std::string_view template_source, std::string_view prompt);
  // The same for a model's ChatTemplate, which may be DeepSeek's built-in encoder (DSML tool calls, <think>).
  static ChatOutputOptions for_chat_template(const ChatTemplate& chat_template, std::string_view prompt);

  // A selected parser reads markers that are special tokens, so the detokenizer must keep them in the text.
  bool keeps_special_tokens() const;
};

class ChatOutputParser {
 public:
  // Unknown parser names in `options` are an Error naming the valid ones.
  explicit ChatOutputParser(ChatOutputOptions options);

  ChatDelta feed(std::string_view text);
  ChatDelta flush();

  // Parses a complete output.
  static ChatMessage parse(std::string_view text, const ChatOutputOptions& options);

 private:
  void add_content(ChatDelta& delta, const ToolCallParseDelta& parsed);

  ChatOutputOptions options_;
  std::unique_ptr<ReasoningParser> reasoning_;
  std::unique_ptr<ToolCallParser> tool_calls_;
  int num_tool_calls_ = 0;
};

}  // namespace tern::chat
