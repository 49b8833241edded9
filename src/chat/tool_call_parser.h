#pragma once
// Finds tool calls in the content a model writes, streaming. Each format is a ToolCallParser made by name through
// output_parser_registry.h (vLLM's --tool-call-parser names). A call is reported once it is complete and valid;
// text that turns out not to be a valid call stays content.
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
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

class ToolCallParser {
 public:
  virtual ~ToolCallParser() = default;
  // Feeds the next piece of content; text that may still become a call is held back.
  virtual ToolCallParseDelta feed(std::string_view text) = 0;
  // The output ended: an unfinished call is reported if it is complete enough to be valid, else returned as content.
  virtual ToolCallParseDelta flush() = 0;
};

// The streaming shape the formats' parsers share: text is held in a buffer, each piece fed is processed at once, and
// flush processes what is left as the end of the output.
class BufferedToolCallParser : public ToolCallParser {
 public:
  ToolCallParseDelta feed(std::string_view text) final {
    buffer_ += text;
    ToolCallParseDelta delta;
    process(delta, false);
    return delta;
  }
  ToolCallParseDelta flush() final {
    ToolCallParseDelta delta;
    process(delta, true);
    return delta;
  }

 protected:
  // Moves what is now certain out of buffer_ into `delta`; `final`: the output ended.
  virtual void process(ToolCallParseDelta& delta, bool final) = 0;

  std::string buffer_;
};

// Everything passes through as content (no tool-call parser selected, or tool calls not asked for).
class PlainContentParser : public ToolCallParser {
 public:
  ToolCallParseDelta feed(std::string_view text) override { return {std::string(text), {}}; }
  ToolCallParseDelta flush() override { return {}; }
};

// Reads one call object: {"name": string, "arguments" or "parameters": object or JSON text}. False if it is not one.
bool parse_tool_call_json(std::string_view json_text, ParsedToolCall& call);

// Arguments given as JSON text: false unless it is one JSON object (surrounding whitespace allowed); `arguments`
// gets it in Python's json.dumps layout, as vLLM returns arguments.
bool arguments_from_json_text(std::string_view json_text, std::string& arguments);
// The same for arguments built by a parser (formats that write parameters one by one).
std::string arguments_text(const nlohmann::ordered_json& object);

// A parameter value written as bare text (GLM-4.5's <arg_value>, Qwen3-Coder's <parameter=...>): JSON when the text
// is a JSON value (a number, true, an object...), else the text as a string. Without the tool's schema at hand this
// is how the text reads best: the templates write strings bare and everything else as JSON.
nlohmann::ordered_json parameter_value(std::string_view text);

// The request's tools' parameter schemas by function name. With them, formats that write values as bare text read
// a parameter the schema types as a string as that text even when it looks like JSON ("123", "true"), as vLLM does.
using ToolParameterSchemas = std::map<std::string, nlohmann::ordered_json, std::less<>>;

// From OpenAI's "tools" list; entries without a function name are skipped, a function without parameters has none.
ToolParameterSchemas tool_parameter_schemas(const nlohmann::ordered_json& tools);

// parameter_value, except that the text stays a string when `tools` type the function's parameter `key` as one.
nlohmann::ordered_json parameter_value(std::string_view text, const ToolParameterSchemas& tools,
                                       std::string_view function, std::string_view key);

// Length of the JSON object or array that `text` starts with ('{' or '['), or 0 while it is incomplete. Brackets
// inside strings do not count; the value is not validated.
size_t complete_json_value_len(std::string_view text);

bool is_json_space(char c);
std::string_view trim_json_space(std::string_view text);

}  // namespace tern::chat
