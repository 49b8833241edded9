// Pythonic tool calls (Llama 3.2 / 4, ToolACE): the whole output is a Python list of calls with keyword arguments,
//   [get_weather(city="San Francisco", unit='celsius'), get_time(zone=None)]
// optionally between Llama 4's <|python_start|> and <|python_end|>. Argument values are Python literals (strings,
// numbers, True/False/None, lists, tuples, dicts), turned into JSON. An output that is not such a list is content.
#include <cctype>

#include "chat/python_string.h"
#include "chat/tool_call_parsers.h"
#include "core/error.h"
#include "core/nesting_limit.h"

namespace tern::chat {
namespace {

constexpr std::string_view kPythonStart = "<|python_start|>";
constexpr std::string_view kPythonEnd = "<|python_end|>";

// Recursive descent over the call list; every reader returns false at the first thing it does not accept.
class PythonCallReader {
 public:
  explicit PythonCallReader(std::string_view text) : text_(text) {}

  bool read_calls(std::vector<ParsedToolCall>& calls) {
    if (!consume('[')) return false;
    while (true) {
      ParsedToolCall call;
      if (!read_call(call)) return false;
      calls.push_back(std::move(call));
      if (consume(']')) break;
      if (!consume(',')) return false;
      if (consume(']')) break;  // a trailing comma
    }
    skip_space();
    return pos_ == text_.size();
  }

 private:
  void skip_space() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }

  bool consume(char c) {
    skip_space();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }

  bool read_identifier(std::string& name) {
    skip_space();
    size_t start = pos_;
    while (pos_ < text_.size() && (std::isalnum(static_cast<unsigned char>(text_[pos_])) || text_[pos_] == '_' ||
                                   (pos_ > start && text_[pos_] == '.'))) {
      ++pos_;
    }
    if (pos_ == start || std::isdigit(static_cast<unsigned char>(text_[start]))) return false;
    name = std::string(text_.substr(start, pos_ - start));
    return true;
  }

  bool read_call(ParsedToolCall& call) {
    if (!read_identifier(call.name) || !consume('(')) return false;
    auto arguments = nlohmann::ordered_json::object();
    while (!consume(')')) {
      std::string key;
      nlohmann::ordered_json value;
      if (!read_identifier(key) || !consume('=') || !read_value(value)) return false;
      arguments[key] = std::move(value);
      if (consume(')')) break;
      if (!consume(',')) return false;
    }
    call.arguments = arguments_text(arguments);
    return true;
  }

  bool read_value(nlohmann::ordered_json& value) {
    NestingLevel level(depth_, "pythonic tool call");
    skip_space();
    if (pos_ >= text_.size()) return false;
    char c = text_[pos_];
    if (c == '"' || c == '\'') {
      std::string text;
      if (!read_string(text)) return false;
      value = std::move(text);
      return true;
    }
    if (c == '[' || c == '(') return read_sequence(c == '[' ? ']' : ')', value);
    if (c == '{') return read_dict(value);
    if (c == '-' || c == '+' || c == '.' || std::isdigit(static_cast<unsigned char>(c))) return read_number(value);
    std::string word;
    if (!read_identifier(word)) return false;
    if (word == "True" || word == "False") {
      value = word == "True";
    } else if (word == "None") {
      value = nullptr;
    } else {
      return false;
    }
    return true;
  }

  bool read_sequence(char close, nlohmann::ordered_json& value) {
    ++pos_;
    value = nlohmann::ordered_json::array();
    while (!consume(close)) {
      nlohmann::ordered_json item;
      if (!read_value(item)) return false;
      value.push_back(std::move(item));
      if (consume(close)) break;
      if (!consume(',')) return false;
    }
    return true;
  }

  bool read_dict(nlohmann::ordered_json& value) {
    ++pos_;
    value = nlohmann::ordered_json::object();
    while (!consume('}')) {
      nlohmann::ordered_json key;
      nlohmann::ordered_json item;
      if (!read_value(key) || !key.is_string() || !consume(':') || !read_value(item)) return false;
      value[key.get<std::string>()] = std::move(item);
      if (consume('}')) break;
      if (!consume(',')) return false;
    }
    return true;
  }

  bool read_number(nlohmann::ordered_json& value) {
    size_t start = pos_;
    if (text_[pos_] == '-' || text_[pos_] == '+') ++pos_;
    bool is_float = false;
    while (pos_ < text_.size()) {
      char c = text_[pos_];
      if (c == '.' || c == 'e' || c == 'E') {
        is_float = true;
      } else if ((c == '-' || c == '+') && (text_[pos_ - 1] == 'e' || text_[pos_ - 1] == 'E')) {
      } else if (!std::isdigit(static_cast<unsigned char>(c)) && c != '_') {
        break;
      }
      ++pos_;
    }
    std::string digits;
    for (char c : text_.substr(start, pos_ - start)) {
      if (c != '_') digits += c;
    }
    try {
      size_t used = 0;
      if (is_float) {
        value = std::stod(digits, &used);
      } else {
        value = std::stoll(digits, &used);
      }
      return used == digits.size();
    } catch (const std::exception&) {
      return false;
    }
  }

  bool read_string(std::string& out) {
    char quote = text_[pos_++];
    while (pos_ < text_.size() && text_[pos_] != quote) {
      char c = text_[pos_++];
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= text_.size()) return false;
      char escaped = text_[pos_++];
      switch (escaped) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case '0': out += '\0'; break;
        case '\\': case '\'': case '"': out += escaped; break;
        case 'x': case 'u': case 'U': {
          size_t len = escaped == 'x' ? 2 : escaped == 'u' ? 4 : 8;
          if (pos_ + len > text_.size()) return false;
          std::string hex(text_.substr(pos_, len));
          if (hex.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos) return false;
          pos_ += len;
          char32_t code_point = static_cast<char32_t>(std::stoul(hex, nullptr, 16));
          if (code_point > 0x10FFFF) return false;
          out += encode_utf8(std::u32string(1, code_point));
          break;
        }
        default: out += '\\'; out += escaped;
      }
    }
    if (pos_ >= text_.size()) return false;
    ++pos_;
    return true;
  }

  std::string_view text_;
  size_t pos_ = 0;
  int depth_ = 0;
};

class PythonicToolCallParser : public ToolCallParser {
 public:
  ToolCallParseDelta feed(std::string_view text) override {
    ToolCallParseDelta delta;
    buffer_ += text;
    if (state_ == State::kStart) decide(false);
    if (state_ == State::kContent) {
      delta.content = std::move(buffer_);
      buffer_.clear();
    }
    return delta;
  }

  ToolCallParseDelta flush() override {
    ToolCallParseDelta delta;
    if (state_ == State::kStart) decide(true);
    std::vector<ParsedToolCall> calls;
    if (state_ == State::kCalls && parse_calls(calls)) {
      buffer_.clear();
      delta.calls = std::move(calls);
      return delta;
    }
    delta.content = std::move(buffer_);
    buffer_.clear();
    return delta;
  }

 private:
  enum class State { kStart, kCalls, kContent };

  // Whether the output opens a call list; undecided while it is whitespace or a prefix of <|python_start|>.
  void decide(bool final) {
    std::string_view rest = trim_json_space(buffer_);
    if (rest.substr(0, kPythonStart.size()) == kPythonStart) rest = trim_json_space(rest.substr(kPythonStart.size()));
    if (!rest.empty() && rest.front() == '[') {
      state_ = State::kCalls;
    } else if (final || !(rest.empty() || kPythonStart.substr(0, rest.size()) == rest)) {
      state_ = State::kContent;
    }
  }

  bool parse_calls(std::vector<ParsedToolCall>& calls) const {
    std::string_view text = trim_json_space(buffer_);
    if (text.substr(0, kPythonStart.size()) == kPythonStart) {
      text.remove_prefix(kPythonStart.size());
      size_t end = text.rfind(kPythonEnd);
      if (end != std::string_view::npos) {
        if (!trim_json_space(text.substr(end + kPythonEnd.size())).empty()) return false;
        text = text.substr(0, end);
      }
    }
    try {
      return PythonCallReader(trim_json_space(text)).read_calls(calls);
    } catch (const Error&) {
      return false;  // nested too deep: not a call the client could use, so it stays content
    }
  }

  std::string buffer_;
  State state_ = State::kStart;
};

}  // namespace

std::unique_ptr<ToolCallParser> make_pythonic_tool_call_parser() { return std::make_unique<PythonicToolCallParser>(); }

}  // namespace tern::chat
