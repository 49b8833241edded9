// GLM-4.5 / 4.6 tool calls: the name, then each argument as a key and a value, in a <tool_call> block:
//   <tool_call>NAME\n<arg_key>KEY</arg_key>\n<arg_value>VALUE</arg_value>\n...</tool_call>
// Values are bare text, read by the request's tool schemas when they are known (see parameter_value).
#include "chat/block_tool_call_parser.h"
#include "chat/tool_call_parsers.h"

namespace tern::chat {
namespace {

constexpr std::string_view kKeyBegin = "<arg_key>";
constexpr std::string_view kKeyEnd = "</arg_key>";
constexpr std::string_view kValueBegin = "<arg_value>";
constexpr std::string_view kValueEnd = "</arg_value>";

// The text between `begin` and `end` at the start of `text` (after whitespace), which is moved past it.
bool take_element(std::string_view& text, std::string_view begin, std::string_view end, std::string_view& inner) {
  text = trim_json_space(text);
  if (text.substr(0, begin.size()) != begin) return false;
  size_t close = text.find(end, begin.size());
  if (close == std::string_view::npos) return false;
  inner = text.substr(begin.size(), close - begin.size());
  text.remove_prefix(close + end.size());
  return true;
}

class Glm45ToolCallParser : public BlockToolCallParser {
 public:
  explicit Glm45ToolCallParser(const ToolParameterSchemas& tools)
      : BlockToolCallParser("<tool_call>", "</tool_call>"), tools_(tools) {}

 private:
  bool parse_block(std::string_view inner, std::vector<ParsedToolCall>& calls) const override {
    size_t first_key = inner.find(kKeyBegin);
    ParsedToolCall call;
    call.name = std::string(trim_json_space(inner.substr(0, first_key)));
    if (call.name.empty() || call.name.find_first_of("<>\n") != std::string::npos) return false;
    std::string_view rest = first_key == std::string_view::npos ? std::string_view() : inner.substr(first_key);
    auto arguments = nlohmann::ordered_json::object();
    while (!trim_json_space(rest).empty()) {
      std::string_view key;
      std::string_view value;
      if (!take_element(rest, kKeyBegin, kKeyEnd, key) || !take_element(rest, kValueBegin, kValueEnd, value)) {
        return false;
      }
      const std::string name(trim_json_space(key));
      arguments[name] = parameter_value(value, tools_, call.name, name);
    }
    call.arguments = arguments_text(arguments);
    calls.push_back(std::move(call));
    return true;
  }

  ToolParameterSchemas tools_;
};

}  // namespace

std::unique_ptr<ToolCallParser> make_glm45_tool_call_parser(const ToolParameterSchemas& tools) {
  return std::make_unique<Glm45ToolCallParser>(tools);
}

}  // namespace tern::chat
