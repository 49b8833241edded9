// Llama 3.1 / 3.2 JSON tool calls: {"name": ..., "parameters": {...}} at the start of the output, optionally after
// <|python_tag|>, several joined by ';'.
#include "chat/tool_call_parsers.h"

namespace tern::chat {
namespace {

class Llama3JsonToolCallParser : public BufferedToolCallParser {
 private:
  static constexpr std::string_view kPythonTag = "<|python_tag|>";
  enum class State { kStart, kCalls, kContent };

  void to_content(ToolCallParseDelta& delta) {
    state_ = State::kContent;
    delta.content += buffer_;
    buffer_.clear();
  }

  void process(ToolCallParseDelta& delta, bool final) override {
    while (!buffer_.empty()) {
      switch (state_) {
        case State::kStart: {
          // Calls are recognized only at the start of the output, as Llama 3 writes them.
          size_t first = 0;
          while (first < buffer_.size() && is_json_space(buffer_[first])) ++first;
          std::string_view rest = std::string_view(buffer_).substr(first);
          if (rest.substr(0, kPythonTag.size()) == kPythonTag) {
            buffer_.erase(0, first + kPythonTag.size());
            state_ = State::kCalls;
            continue;
          }
          if (!rest.empty() && rest[0] == '{') {
            buffer_.erase(0, first);
            state_ = State::kCalls;
            continue;
          }
          bool may_be_tag = rest.empty() || kPythonTag.substr(0, rest.size()) == rest;
          if (may_be_tag && !final) return;
          to_content(delta);
          return;
        }
        case State::kCalls: {
          size_t first = 0;
          while (first < buffer_.size() && (is_json_space(buffer_[first]) || buffer_[first] == ';')) ++first;
          if (first == buffer_.size()) {
            if (final) buffer_.clear();
            return;
          }
          if (buffer_[first] != '{') {
            buffer_.erase(0, first);
            to_content(delta);
            return;
          }
          size_t len = complete_json_value_len(std::string_view(buffer_).substr(first));
          if (len == 0) {
            if (final) {
              buffer_.erase(0, first);
              to_content(delta);
            }
            return;
          }
          ParsedToolCall call;
          if (!parse_tool_call_json(std::string_view(buffer_).substr(first, len), call)) {
            buffer_.erase(0, first);
            to_content(delta);
            return;
          }
          delta.calls.push_back(std::move(call));
          buffer_.erase(0, first + len);
          continue;
        }
        case State::kContent: to_content(delta); return;
      }
    }
  }

  State state_ = State::kStart;
};

}  // namespace

std::unique_ptr<ToolCallParser> make_llama3_json_tool_call_parser() {
  return std::make_unique<Llama3JsonToolCallParser>();
}

}  // namespace tern::chat
