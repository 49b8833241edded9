// Mistral tool calls: content, then [TOOL_CALLS] and the calls up to the end of the output, in one of two forms:
//   tokenizers before v11:  [TOOL_CALLS] [{"name": ..., "arguments": {...}}, ...]
//   v11 and later:          [TOOL_CALLS]NAME[ARGS]{arguments}[TOOL_CALLS]NAME[ARGS]{...}
// (some checkpoints add [CALL_ID]ID before [ARGS]).
#include "chat/block_tool_call_parser.h"
#include "chat/tool_call_parsers.h"
#include "core/nesting_limit.h"
#include "core/ordered_json_parser.h"

namespace tern::chat {
namespace {

constexpr std::string_view kToolCalls = "[TOOL_CALLS]";
constexpr std::string_view kArgs = "[ARGS]";
constexpr std::string_view kCallId = "[CALL_ID]";

bool parse_json_calls(std::string_view text, std::vector<ParsedToolCall>& calls) {
  if (!json_nesting_within_limit(text)) return false;
  auto json = parse_ordered_json(text, /*allow_exceptions=*/false);
  if (json.is_object()) json = nlohmann::ordered_json::array({std::move(json)});
  if (!json.is_array() || json.empty()) return false;
  for (const auto& entry : json) {
    ParsedToolCall call;
    if (!parse_tool_call_json(entry.dump(), call)) return false;
    calls.push_back(std::move(call));
  }
  return true;
}

bool parse_named_call(std::string_view text, ParsedToolCall& call) {
  size_t args = text.find(kArgs);
  if (args == std::string_view::npos) return false;
  std::string_view name = text.substr(0, args);
  name = name.substr(0, name.find(kCallId));
  call.name = std::string(trim_json_space(name));
  return !call.name.empty() && arguments_from_json_text(text.substr(args + kArgs.size()), call.arguments);
}

class MistralToolCallParser : public BlockToolCallParser {
 public:
  MistralToolCallParser() : BlockToolCallParser(kToolCalls, "") {}

 private:
  bool parse_block(std::string_view inner, std::vector<ParsedToolCall>& calls) const override {
    inner = trim_json_space(inner);
    if (!inner.empty() && (inner.front() == '[' || inner.front() == '{')) return parse_json_calls(inner, calls);
    while (!inner.empty()) {
      size_t next = inner.find(kToolCalls);
      ParsedToolCall call;
      if (!parse_named_call(inner.substr(0, next), call)) return false;
      calls.push_back(std::move(call));
      inner = next == std::string_view::npos ? std::string_view() : inner.substr(next + kToolCalls.size());
    }
    return !calls.empty();
  }
};

}  // namespace

std::unique_ptr<ToolCallParser> make_mistral_tool_call_parser() { return std::make_unique<MistralToolCallParser>(); }

}  // namespace tern::chat
