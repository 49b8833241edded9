// Kimi K2 tool calls: <|tool_calls_section_begin|> then, per call,
//   <|tool_call_begin|>functions.NAME:INDEX<|tool_call_argument_begin|>{arguments}<|tool_call_end|>
// and <|tool_calls_section_end|>. The call id names the function between its last '.' and the ':'.
#include "chat/block_tool_call_parser.h"
#include "chat/tool_call_parsers.h"

namespace tern::chat {
namespace {

constexpr std::string_view kCallBegin = "<|tool_call_begin|>";
constexpr std::string_view kArgumentBegin = "<|tool_call_argument_begin|>";
constexpr std::string_view kCallEnd = "<|tool_call_end|>";

bool parse_call(std::string_view call, ParsedToolCall& parsed) {
  size_t arguments = call.find(kArgumentBegin);
  if (arguments == std::string_view::npos) return false;
  std::string_view id = trim_json_space(call.substr(0, arguments));
  id = id.substr(0, id.find(':'));
  size_t dot = id.rfind('.');
  if (dot != std::string_view::npos) id.remove_prefix(dot + 1);
  parsed.name = std::string(id);
  return !parsed.name.empty() &&
         arguments_from_json_text(call.substr(arguments + kArgumentBegin.size()), parsed.arguments);
}

class KimiK2ToolCallParser : public BlockToolCallParser {
 public:
  KimiK2ToolCallParser() : BlockToolCallParser("<|tool_calls_section_begin|>", "<|tool_calls_section_end|>") {}

 private:
  bool parse_block(std::string_view inner, std::vector<ParsedToolCall>& calls) const override {
    return parse_delimited_calls(inner, kCallBegin, kCallEnd, parse_call, calls);
  }
};

}  // namespace

std::unique_ptr<ToolCallParser> make_kimi_k2_tool_call_parser() { return std::make_unique<KimiK2ToolCallParser>(); }

}  // namespace tern::chat
