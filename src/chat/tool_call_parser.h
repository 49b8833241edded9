#pragma once
// Finds tool calls in the content a model writes, streaming, in two formats:
//  - Hermes / Qwen3: <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>, possibly several;
//  - Llama 3 JSON: {"name": ..., "parameters": {...}} (optionally after <|python_tag|>, several joined by ';').
// A call is reported once it is complete and valid; text that turns out not to be a valid call stays content.
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace tern::chat {

struct ParsedToolCall {
  std::string name;
  std::string arguments;  // a JSON object as text, as OpenAI's function.arguments
};

struct ToolCallParseDelta {
  std::string content;
  std::vector<ParsedToolCall> calls;
};

enum class ToolCallFormat { kNone, kHermes, kLlama3Json };

class ToolCallParser {
 public:
  virtual ~ToolCallParser() = default;
  // Feeds the next piece of content; text that may still become a call is held back.
  virtual ToolCallParseDelta feed(std::string_view text) = 0;
  // The output ended: an unfinished call is reported if its JSON is complete and valid, else returned as content.
  virtual ToolCallParseDelta flush() = 0;
};

std::unique_ptr<ToolCallParser> make_tool_call_parser(ToolCallFormat format);

// Reads one call object: {"name": string, "arguments" or "parameters": object or JSON text}. False if it is not one.
bool parse_tool_call_json(std::string_view json_text, ParsedToolCall& call);

}  // namespace tern::chat
