#include "chat/tool_call_parser.h"

#include <nlohmann/json.hpp>

#include "chat/partial_tag.h"
#include "chat/value.h"
#include "core/nesting_limit.h"
#include "core/ordered_json_parser.h"

namespace tern::chat {
namespace {

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

size_t skip_spaces(std::string_view text, size_t pos) {
  while (pos < text.size() && is_space(text[pos])) ++pos;
  return pos;
}

// Everything passes through as content.
class PlainContentParser : public ToolCallParser {
 public:
  ToolCallParseDelta feed(std::string_view text) override { return {std::string(text), {}}; }
  ToolCallParseDelta flush() override { return {}; }
};

class HermesToolCallParser : public ToolCallParser {
 public:
  ToolCallParseDelta feed(std::string_view text) override {
    buffer_ += text;
    ToolCallParseDelta delta;
    process(delta, false);
    return delta;
  }

  ToolCallParseDelta flush() override {
    ToolCallParseDelta delta;
    process(delta, true);
    return delta;
  }

 private:
  static constexpr std::string_view kStart = "<tool_call>";
  static constexpr std::string_view kEnd = "</tool_call>";

  void process(ToolCallParseDelta& delta, bool final) {
    while (!buffer_.empty()) {
      if (!in_call_) {
        if (after_call_) {
          // The whitespace between and after calls is formatting, not content.
          size_t first = skip_spaces(buffer_, 0);
          buffer_.erase(0, first);
          if (buffer_.empty()) return;
          after_call_ = false;
        }
        size_t start = buffer_.find(kStart);
        if (start == std::string::npos) {
          size_t held = final ? 0 : partial_tag_suffix_len(buffer_, {kStart});
          delta.content += buffer_.substr(0, buffer_.size() - held);
          buffer_.erase(0, buffer_.size() - held);
          return;
        }
        delta.content += buffer_.substr(0, start);
        buffer_.erase(0, start + kStart.size());
        in_call_ = true;
        continue;
      }
      size_t end = buffer_.find(kEnd);
      if (end == std::string::npos) {
        if (!final) return;  // a call is reported whole, once its end tag arrives
        ParsedToolCall call;
        if (parse_tool_call_json(buffer_, call)) {
          delta.calls.push_back(std::move(call));
        } else {
          delta.content += std::string(kStart) + buffer_;
        }
        buffer_.clear();
        in_call_ = false;
        return;
      }
      ParsedToolCall call;
      after_call_ = parse_tool_call_json(std::string_view(buffer_).substr(0, end), call);
      if (after_call_) {
        delta.calls.push_back(std::move(call));
      } else {
        delta.content += std::string(kStart) + buffer_.substr(0, end + kEnd.size());
      }
      buffer_.erase(0, end + kEnd.size());
      in_call_ = false;
    }
  }

  std::string buffer_;
  bool in_call_ = false;
  bool after_call_ = false;
};

class Llama3JsonToolCallParser : public ToolCallParser {
 public:
  ToolCallParseDelta feed(std::string_view text) override {
    buffer_ += text;
    ToolCallParseDelta delta;
    process(delta, false);
    return delta;
  }

  ToolCallParseDelta flush() override {
    ToolCallParseDelta delta;
    process(delta, true);
    return delta;
  }

 private:
  static constexpr std::string_view kPythonTag = "<|python_tag|>";
  enum class State { kStart, kCalls, kContent };

  // Length of the JSON object at the start of `text` (which begins with '{'), or 0 while it is incomplete.
  static size_t complete_object_len(std::string_view text) {
    int depth = 0;
    bool in_string = false;
    for (size_t i = 0; i < text.size(); ++i) {
      char c = text[i];
      if (in_string) {
        if (c == '\\') {
          ++i;
        } else if (c == '"') {
          in_string = false;
        }
      } else if (c == '"') {
        in_string = true;
      } else if (c == '{' || c == '[') {
        ++depth;
      } else if (c == '}' || c == ']') {
        if (--depth == 0) return i + 1;
      }
    }
    return 0;
  }

  void to_content(ToolCallParseDelta& delta) {
    state_ = State::kContent;
    delta.content += buffer_;
    buffer_.clear();
  }

  void process(ToolCallParseDelta& delta, bool final) {
    while (!buffer_.empty()) {
      switch (state_) {
        case State::kStart: {
          // Calls are recognized only at the start of the output, as Llama 3 writes them.
          size_t first = skip_spaces(buffer_, 0);
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
          while (first < buffer_.size() && (is_space(buffer_[first]) || buffer_[first] == ';')) ++first;
          if (first == buffer_.size()) {
            if (final) buffer_.clear();
            return;
          }
          if (buffer_[first] != '{') {
            buffer_.erase(0, first);
            to_content(delta);
            return;
          }
          size_t len = complete_object_len(std::string_view(buffer_).substr(first));
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

  std::string buffer_;
  State state_ = State::kStart;
};

}  // namespace

bool parse_tool_call_json(std::string_view json_text, ParsedToolCall& call) {
  // JSON nested deeper than Value::from_json converts is not a tool call (the text stays content).
  if (!json_nesting_within_limit(json_text)) return false;
  auto json = parse_ordered_json(json_text, /*allow_exceptions=*/false);
  if (!json.is_object() || !json.contains("name") || !json["name"].is_string()) return false;
  const char* arguments_key = json.contains("arguments") ? "arguments" : "parameters";
  nlohmann::ordered_json arguments = json.contains(arguments_key) ? json[arguments_key] : nlohmann::ordered_json::object();
  if (arguments.is_string()) {
    // Some models write the arguments as JSON text inside a string; it must still be an object.
    if (!json_nesting_within_limit(arguments.get_ref<const std::string&>())) return false;
    auto inner = parse_ordered_json(arguments.get<std::string>(), /*allow_exceptions=*/false);
    if (!inner.is_object()) return false;
    arguments = std::move(inner);
  }
  if (!arguments.is_object()) return false;
  call.name = json["name"].get<std::string>();
  // Python's json.dumps layout, as vLLM returns arguments.
  call.arguments = Value::from_json(arguments).to_json_text();
  return true;
}

std::unique_ptr<ToolCallParser> make_tool_call_parser(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::kHermes: return std::make_unique<HermesToolCallParser>();
    case ToolCallFormat::kLlama3Json: return std::make_unique<Llama3JsonToolCallParser>();
    case ToolCallFormat::kNone: break;
  }
  return std::make_unique<PlainContentParser>();
}

}  // namespace tern::chat
