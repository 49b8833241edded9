// DeepSeek-V3 / R1 and V3.1 tool calls: a section of calls between <｜tool▁calls▁begin｜> and <｜tool▁calls▁end｜>,
// each between <｜tool▁call▁begin｜> and <｜tool▁call▁end｜>. They differ in what a call holds:
//   V3 / R1:  function<｜tool▁sep｜>NAME\n```json\n{arguments}\n```
//   V3.1:     NAME<｜tool▁sep｜>{arguments}
#include "chat/block_tool_call_parser.h"
#include "chat/tool_call_parsers.h"

namespace tern::chat {
namespace {

constexpr std::string_view kCallBegin = "<｜tool▁call▁begin｜>";
constexpr std::string_view kCallEnd = "<｜tool▁call▁end｜>";
constexpr std::string_view kSeparator = "<｜tool▁sep｜>";

// V3 / R1 fences the arguments as a Markdown JSON block.
bool parse_v3_call(std::string_view call, ParsedToolCall& parsed) {
  size_t separator = call.find(kSeparator);
  if (separator == std::string_view::npos || trim_json_space(call.substr(0, separator)) != "function") return false;
  std::string_view rest = call.substr(separator + kSeparator.size());
  size_t newline = rest.find('\n');
  if (newline == std::string_view::npos) return false;
  parsed.name = std::string(trim_json_space(rest.substr(0, newline)));
  std::string_view arguments = trim_json_space(rest.substr(newline + 1));
  static constexpr std::string_view kFenceOpen = "```json";
  static constexpr std::string_view kFence = "```";
  if (arguments.substr(0, kFenceOpen.size()) == kFenceOpen) {
    arguments.remove_prefix(kFenceOpen.size());
  } else if (arguments.substr(0, kFence.size()) == kFence) {
    arguments.remove_prefix(kFence.size());
  }
  if (arguments.size() >= kFence.size() && arguments.substr(arguments.size() - kFence.size()) == kFence) {
    arguments.remove_suffix(kFence.size());
  }
  return !parsed.name.empty() && arguments_from_json_text(arguments, parsed.arguments);
}

bool parse_v31_call(std::string_view call, ParsedToolCall& parsed) {
  size_t separator = call.find(kSeparator);
  if (separator == std::string_view::npos) return false;
  parsed.name = std::string(trim_json_space(call.substr(0, separator)));
  return !parsed.name.empty() && arguments_from_json_text(call.substr(separator + kSeparator.size()), parsed.arguments);
}

class DeepSeekToolCallParser : public BlockToolCallParser {
 public:
  using CallReader = bool (*)(std::string_view, ParsedToolCall&);
  explicit DeepSeekToolCallParser(CallReader read_call)
      : BlockToolCallParser("<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"), read_call_(read_call) {}

 private:
  bool parse_block(std::string_view inner, std::vector<ParsedToolCall>& calls) const override {
    return parse_delimited_calls(inner, kCallBegin, kCallEnd, read_call_, calls);
  }

  CallReader read_call_;
};

}  // namespace

std::unique_ptr<ToolCallParser> make_deepseek_v3_tool_call_parser() {
  return std::make_unique<DeepSeekToolCallParser>(parse_v3_call);
}

std::unique_ptr<ToolCallParser> make_deepseek_v31_tool_call_parser() {
  return std::make_unique<DeepSeekToolCallParser>(parse_v31_call);
}

}  // namespace tern::chat
