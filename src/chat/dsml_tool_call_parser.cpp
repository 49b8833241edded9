#include "chat/dsml_tool_call_parser.h"

#include <fmt/format.h>

#include <optional>

#include "chat/partial_tag.h"

namespace tern::chat {
namespace {

constexpr std::string_view kInvokeOpen = "<｜DSML｜invoke";
constexpr std::string_view kInvokeClose = "</｜DSML｜invoke>";
constexpr std::string_view kParameterOpen = "<｜DSML｜parameter";
constexpr std::string_view kParameterClose = "</｜DSML｜parameter>";
// The encoders separate the block from the content before it by a blank line.
constexpr size_t kMaxSeparatorNewlines = 2;

size_t leading_space_len(std::string_view text) {
  size_t len = 0;
  while (len < text.size() && is_json_space(text[len])) ++len;
  return len;
}

bool consume(std::string_view& text, std::string_view prefix) {
  if (text.substr(0, prefix.size()) != prefix) return false;
  text.remove_prefix(prefix.size());
  return true;
}

// The text up to `delimiter`, which is consumed; nullopt without one.
std::optional<std::string_view> consume_until(std::string_view& text, std::string_view delimiter) {
  size_t end = text.find(delimiter);
  if (end == std::string_view::npos) return std::nullopt;
  std::string_view before = text.substr(0, end);
  text.remove_prefix(end + delimiter.size());
  return before;
}

// One <｜DSML｜invoke ...>...</｜DSML｜invoke>, whole; nullopt if it is not well formed.
std::optional<ParsedToolCall> parse_invoke(std::string_view text) {
  if (!consume(text, kInvokeOpen)) return std::nullopt;
  text.remove_prefix(leading_space_len(text));
  if (!consume(text, "name=\"")) return std::nullopt;
  auto name = consume_until(text, "\">");
  if (!name || name->empty()) return std::nullopt;
  if (text.size() < kInvokeClose.size() || text.substr(text.size() - kInvokeClose.size()) != kInvokeClose) {
    return std::nullopt;
  }
  text.remove_suffix(kInvokeClose.size());
  nlohmann::ordered_json arguments = nlohmann::ordered_json::object();
  while (true) {
    text.remove_prefix(leading_space_len(text));
    if (text.empty()) break;
    if (!consume(text, kParameterOpen)) return std::nullopt;
    text.remove_prefix(leading_space_len(text));
    if (!consume(text, "name=\"")) return std::nullopt;
    auto key = consume_until(text, "\" string=\"");
    if (!key) return std::nullopt;
    const bool is_string = consume(text, "true\">");
    if (!is_string && !consume(text, "false\">")) return std::nullopt;
    auto value = consume_until(text, kParameterClose);
    if (!value || arguments.contains(*key)) return std::nullopt;
    arguments[std::string(*key)] = is_string ? nlohmann::ordered_json(std::string(*value)) : parameter_value(*value);
  }
  return ParsedToolCall{std::string(*name), arguments_text(arguments)};
}

class DsmlToolCallParser : public BufferedToolCallParser {
 public:
  explicit DsmlToolCallParser(std::string_view block_name)
      : block_start_(fmt::format("<｜DSML｜{}>", block_name)),
        block_end_(fmt::format("</｜DSML｜{}>", block_name)),
        separated_starts_{"\n" + block_start_, "\n\n" + block_start_} {}

 private:
  enum class State { kContent, kBlock };

  void process(ToolCallParseDelta& delta, bool final) override {
    while (!buffer_.empty()) {
      if (state_ == State::kContent) {
        if (!read_content(delta, final)) return;
      } else if (!read_block(delta, final)) {
        return;
      }
    }
    // A block the output ends right after its start marker, or after its calls.
    if (final && state_ == State::kBlock) end_block_at_output_end(delta);
  }

  // False once the buffer holds nothing more to read now.
  bool read_content(ToolCallParseDelta& delta, bool final) {
    if (after_block_) {
      // The whitespace after a block is formatting, not content.
      buffer_.erase(0, leading_space_len(buffer_));
      if (buffer_.empty()) return false;
      after_block_ = false;
    }
    size_t start = buffer_.find(block_start_);
    if (start == std::string::npos) {
      // A separator and a start marker may still be arriving: hold them back (the separator, only as long as the
      // marker may follow, so that streamed and whole output agree on it).
      size_t held = final ? 0
                          : partial_tag_suffix_len(buffer_, {block_start_, separated_starts_[0], separated_starts_[1]});
      delta.content += buffer_.substr(0, buffer_.size() - held);
      buffer_.erase(0, buffer_.size() - held);
      return false;
    }
    size_t content_len = start;
    for (size_t i = 0; i < kMaxSeparatorNewlines && content_len > 0 && buffer_[content_len - 1] == '\n'; ++i) {
      --content_len;
    }
    delta.content += buffer_.substr(0, content_len);
    unreported_block_text_ = buffer_.substr(content_len, start + block_start_.size() - content_len);
    buffer_.erase(0, start + block_start_.size());
    state_ = State::kBlock;
    num_block_calls_ = 0;
    return true;
  }

  bool read_block(ToolCallParseDelta& delta, bool final) {
    const size_t space_len = leading_space_len(buffer_);
    std::string_view rest = std::string_view(buffer_).substr(space_len);
    if (rest.empty()) return false;
    if (consume(rest, block_end_)) {
      buffer_.erase(0, space_len + block_end_.size());
      unreported_block_text_.clear();
      state_ = State::kContent;
      after_block_ = true;
      return true;
    }
    if (rest.substr(0, kInvokeOpen.size()) == kInvokeOpen) {
      size_t close = rest.find(kInvokeClose);
      if (close == std::string_view::npos) {
        if (final) keep_as_content(delta);
        return false;  // a call is reported whole, once its end marker arrives
      }
      auto call = parse_invoke(rest.substr(0, close + kInvokeClose.size()));
      if (!call) {
        keep_as_content(delta);
        return false;
      }
      delta.calls.push_back(std::move(*call));
      ++num_block_calls_;
      unreported_block_text_.clear();
      buffer_.erase(0, space_len + close + kInvokeClose.size());
      return true;
    }
    const bool may_become_marker = block_end_.substr(0, rest.size()) == rest || kInvokeOpen.substr(0, rest.size()) == rest;
    if (!may_become_marker) {
      keep_as_content(delta);
      return false;
    }
    if (final) end_block_at_output_end(delta);
    return false;
  }

  // The output ended inside a block: its calls stand, and the end marker the model did not finish is formatting;
  // a block without calls was no block.
  void end_block_at_output_end(ToolCallParseDelta& delta) {
    std::string_view rest = std::string_view(buffer_).substr(leading_space_len(buffer_));
    if (num_block_calls_ > 0 && block_end_.substr(0, rest.size()) == rest) {
      buffer_.clear();
      state_ = State::kContent;
      return;
    }
    keep_as_content(delta);
  }

  // What does not parse is content, from the block's start marker if none of its calls was reported.
  void keep_as_content(ToolCallParseDelta& delta) {
    delta.content += unreported_block_text_ + buffer_;
    unreported_block_text_.clear();
    buffer_.clear();
    state_ = State::kContent;
  }

  const std::string block_start_;
  const std::string block_end_;
  const std::string separated_starts_[2];
  State state_ = State::kContent;
  bool after_block_ = false;
  std::string unreported_block_text_;  // the separator and start marker of a block none of whose calls was reported
  int num_block_calls_ = 0;
};

}  // namespace

std::unique_ptr<ToolCallParser> make_deepseek_v32_tool_call_parser() {
  return std::make_unique<DsmlToolCallParser>("function_calls");
}

std::unique_ptr<ToolCallParser> make_deepseek_v4_tool_call_parser() {
  return std::make_unique<DsmlToolCallParser>("tool_calls");
}

}  // namespace tern::chat
