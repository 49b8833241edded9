#pragma once
// Turns the text a chat model generates into an OpenAI assistant message: reasoning_content, content and
// tool_calls. Works on a stream (text deltas in, message deltas out, like vLLM's streaming parsers) and on a
// whole output; both give the same message, since the whole output is parsed as one delta.
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

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
  bool parse_reasoning = false;      // split <think>...</think> from the content
  bool starts_in_reasoning = false;  // the prompt opened <think> already (see ReasoningParser::prompt_opens_reasoning)
  ToolCallFormat tool_call_format = ToolCallFormat::kNone;
  std::string tool_call_id_prefix;  // ids are "call_<prefix><index>"; empty picks a random prefix

  // Picks the formats a chat template writes (<think>, <tool_call>, <|python_tag|>) and whether `prompt`, rendered
  // with it, leaves a reasoning block open.
  static ChatOutputOptions for_template(std::string_view template_source, std::string_view prompt);
};

class ChatOutputParser {
 public:
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
