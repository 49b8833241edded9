#include "chat/block_tool_call_parser.h"

#include "chat/partial_tag.h"

namespace tern::chat {

BlockToolCallParser::BlockToolCallParser(std::string_view start_marker, std::string_view end_marker)
    : start_marker_(start_marker), end_marker_(end_marker) {}

bool BlockToolCallParser::parse_delimited_calls(std::string_view inner, std::string_view call_begin,
                                                std::string_view call_end,
                                                bool (*read_call)(std::string_view, ParsedToolCall&),
                                                std::vector<ParsedToolCall>& calls) {
  while (!(inner = trim_json_space(inner)).empty()) {
    if (!inner.starts_with(call_begin)) return false;
    inner.remove_prefix(call_begin.size());
    const size_t end = inner.find(call_end);
    ParsedToolCall call;
    if (!read_call(inner.substr(0, end), call)) return false;
    calls.push_back(std::move(call));
    inner = end == std::string_view::npos ? std::string_view() : inner.substr(end + call_end.size());
  }
  return !calls.empty();
}

void BlockToolCallParser::close_block(ToolCallParseDelta& delta, size_t inner_len, size_t consumed_len) {
  std::vector<ParsedToolCall> calls;
  after_block_ = parse_block(std::string_view(buffer_).substr(0, inner_len), calls);
  if (after_block_) {
    for (auto& call : calls) delta.calls.push_back(std::move(call));
  } else {
    delta.content += std::string(start_marker_) + buffer_.substr(0, consumed_len);
  }
  buffer_.erase(0, consumed_len);
  in_block_ = false;
}

void BlockToolCallParser::process(ToolCallParseDelta& delta, bool final) {
  while (!buffer_.empty()) {
    if (!in_block_) {
      if (after_block_) {
        size_t first = 0;
        while (first < buffer_.size() && is_json_space(buffer_[first])) ++first;
        buffer_.erase(0, first);
        if (buffer_.empty()) return;
        after_block_ = false;
      }
      size_t start = buffer_.find(start_marker_);
      if (start == std::string::npos) {
        size_t held = final ? 0 : partial_tag_suffix_len(buffer_, {start_marker_});
        delta.content += buffer_.substr(0, buffer_.size() - held);
        buffer_.erase(0, buffer_.size() - held);
        return;
      }
      delta.content += buffer_.substr(0, start);
      buffer_.erase(0, start + start_marker_.size());
      in_block_ = true;
      continue;
    }
    size_t end = end_marker_.empty() ? std::string::npos : buffer_.find(end_marker_);
    if (end == std::string::npos) {
      if (final) close_block(delta, buffer_.size(), buffer_.size());
      return;
    }
    close_block(delta, end, end + end_marker_.size());
  }
  // An empty block (the start marker was the last thing written) still has to be closed at the end.
  if (final && in_block_) close_block(delta, 0, 0);
}

}  // namespace tern::chat
