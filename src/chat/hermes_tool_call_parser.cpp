// Hermes / Qwen2.5 / Qwen3: <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>, possibly several.
#include "chat/block_tool_call_parser.h"
#include "chat/tool_call_parsers.h"

namespace tern::chat {
namespace {

class HermesToolCallParser : public BlockToolCallParser {
 public:
  HermesToolCallParser() : BlockToolCallParser("<tool_call>", "</tool_call>") {}

 private:
  bool parse_block(std::string_view inner, std::vector<ParsedToolCall>& calls) const override {
    ParsedToolCall call;
    if (!parse_tool_call_json(inner, call)) return false;
    calls.push_back(std::move(call));
    return true;
  }
};

}  // namespace

std::unique_ptr<ToolCallParser> make_hermes_tool_call_parser() { return std::make_unique<HermesToolCallParser>(); }

}  // namespace tern::chat
