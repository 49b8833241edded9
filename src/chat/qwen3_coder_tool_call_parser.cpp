// Qwen3-Coder tool calls, XML-like, one function per <tool_call> block:
//   <tool_call>\n<function=NAME>\n<parameter=KEY>\nVALUE\n</parameter>\n...</function>\n</tool_call>
// A value is bare text (see parameter_value; read by the request's tool schemas when they are known) with the one
// newline the template puts on each side dropped.
#include "chat/block_tool_call_parser.h"
#include "chat/tool_call_parsers.h"

namespace tern::chat {
namespace {

constexpr std::string_view kFunctionBegin = "<function=";
constexpr std::string_view kFunctionEnd = "</function>";
constexpr std::string_view kParameterBegin = "<parameter=";
constexpr std::string_view kParameterEnd = "</parameter>";

std::string_view without_one_newline(std::string_view value) {
  if (!value.empty() && value.front() == '\n') value.remove_prefix(1);
  if (!value.empty() && value.back() == '\n') value.remove_suffix(1);
  return value;
}

class Qwen3CoderToolCallParser : public BlockToolCallParser {
 public:
  explicit Qwen3CoderToolCallParser(const ToolParameterSchemas& tools)
      : BlockToolCallParser("<tool_call>", "</tool_call>"), tools_(tools) {}

 private:
  bool parse_block(std::string_view inner, std::vector<ParsedToolCall>& calls) const override {
    inner = trim_json_space(inner);
    if (inner.substr(0, kFunctionBegin.size()) != kFunctionBegin) return false;
    size_t name_end = inner.find('>');
    if (name_end == std::string_view::npos) return false;
    ParsedToolCall call;
    call.name = std::string(trim_json_space(inner.substr(kFunctionBegin.size(), name_end - kFunctionBegin.size())));
    if (call.name.empty()) return false;
    std::string_view rest = inner.substr(name_end + 1);
    // The closing </function> may be missing when the output stopped right after the last parameter.
    size_t function_end = rest.rfind(kFunctionEnd);
    if (function_end != std::string_view::npos) {
      if (!trim_json_space(rest.substr(function_end + kFunctionEnd.size())).empty()) return false;
      rest = rest.substr(0, function_end);
    }
    auto arguments = nlohmann::ordered_json::object();
    while (!(rest = trim_json_space(rest)).empty()) {
      if (rest.substr(0, kParameterBegin.size()) != kParameterBegin) return false;
      size_t key_end = rest.find('>');
      size_t value_end = rest.find(kParameterEnd);
      if (key_end == std::string_view::npos || value_end == std::string_view::npos || value_end < key_end) return false;
      std::string key(trim_json_space(rest.substr(kParameterBegin.size(), key_end - kParameterBegin.size())));
      const std::string_view value = without_one_newline(rest.substr(key_end + 1, value_end - key_end - 1));
      arguments[key] = parameter_value(value, tools_, call.name, key);
      rest.remove_prefix(value_end + kParameterEnd.size());
    }
    call.arguments = arguments_text(arguments);
    calls.push_back(std::move(call));
    return true;
  }

  ToolParameterSchemas tools_;
};

}  // namespace

std::unique_ptr<ToolCallParser> make_qwen3_coder_tool_call_parser(const ToolParameterSchemas& tools) {
  return std::make_unique<Qwen3CoderToolCallParser>(tools);
}

}  // namespace tern::chat
