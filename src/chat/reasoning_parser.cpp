#include "chat/reasoning_parser.h"

#include "chat/partial_tag.h"

namespace tern::chat {
namespace {

size_t without_trailing_newlines(const std::string& text, size_t len) {
  while (len > 0 && text[len - 1] == '\n') --len;
  return len;
}

}  // namespace

ThinkTagReasoningParser::ThinkTagReasoningParser(bool starts_in_reasoning, ThinkTags tags)
    : tags_(std::move(tags)),
      state_(starts_in_reasoning ? State::kReasoningStart : State::kBeforeReasoning),
      skipping_newlines_(starts_in_reasoning) {}

bool ThinkTagReasoningParser::prompt_opens_reasoning(std::string_view prompt, const ThinkTags& tags) {
  size_t start = prompt.rfind(tags.start);
  if (start == std::string_view::npos) return false;
  size_t end = prompt.rfind(tags.end);
  return end == std::string_view::npos || end < start;
}

bool ThinkTagReasoningParser::prompt_closes_reasoning(std::string_view prompt, const ThinkTags& tags) {
  size_t end = prompt.rfind(tags.end);
  if (end == std::string_view::npos) return false;
  size_t start = prompt.rfind(tags.start);
  return start == std::string_view::npos || start < end;
}

ReasoningDelta ThinkTagReasoningParser::feed(std::string_view text) {
  buffer_ += text;
  ReasoningDelta delta;
  process(delta, false);
  return delta;
}

ReasoningDelta ThinkTagReasoningParser::flush() {
  ReasoningDelta delta;
  process(delta, true);
  return delta;
}

bool ThinkTagReasoningParser::skip_leading_newlines() {
  if (!skipping_newlines_) return true;
  size_t first = buffer_.find_first_not_of('\n');
  if (first == std::string::npos) {
    buffer_.clear();
    return false;
  }
  buffer_.erase(0, first);
  skipping_newlines_ = false;
  return true;
}

size_t ThinkTagReasoningParser::find_reasoning_end(size_t& consumed_len) const {
  size_t end = buffer_.find(tags_.end);
  consumed_len = tags_.end.size();
  if (!tags_.implicit_end.empty()) {
    size_t implicit = buffer_.find(tags_.implicit_end);
    if (implicit < end) {
      end = implicit;
      consumed_len = 0;
    }
  }
  return end;
}

void ThinkTagReasoningParser::process(ReasoningDelta& delta, bool final) {
  while (!buffer_.empty()) {
    switch (state_) {
      case State::kBeforeReasoning: {
        size_t start = buffer_.find(tags_.start);
        if (start != std::string::npos) {
          delta.content += buffer_.substr(0, start);
          buffer_.erase(0, start + tags_.start.size());
          state_ = State::kReasoning;
          skipping_newlines_ = true;
          continue;
        }
        size_t held = final ? 0 : partial_tag_suffix_len(buffer_, {tags_.start});
        delta.content += buffer_.substr(0, buffer_.size() - held);
        buffer_.erase(0, buffer_.size() - held);
        return;
      }
      case State::kReasoningStart: {
        // Reasoning opened by the prompt (or implied by the format): a start tag written anyway is not reasoning.
        if (!skip_leading_newlines()) return;
        if (buffer_.size() < tags_.start.size() && !final &&
            std::string_view(tags_.start).substr(0, buffer_.size()) == buffer_) {
          return;
        }
        if (buffer_.rfind(tags_.start, 0) == 0) {
          buffer_.erase(0, tags_.start.size());
          skipping_newlines_ = true;
        }
        state_ = State::kReasoning;
        continue;
      }
      case State::kReasoning: {
        if (!skip_leading_newlines()) return;
        size_t consumed_len = 0;
        size_t end = find_reasoning_end(consumed_len);
        if (end != std::string::npos) {
          delta.reasoning += buffer_.substr(0, without_trailing_newlines(buffer_, end));
          buffer_.erase(0, end + consumed_len);
          state_ = State::kAfterReasoning;
          skipping_newlines_ = true;
          continue;
        }
        // Hold back a partial end marker and the newlines before it: if the marker completes, they go with it.
        size_t held = final ? 0 : partial_tag_suffix_len(buffer_, {tags_.end, tags_.implicit_end});
        size_t held_from = buffer_.size() - held;
        size_t emit_len = without_trailing_newlines(buffer_, held_from);
        delta.reasoning += buffer_.substr(0, emit_len);
        buffer_.erase(0, final ? buffer_.size() : emit_len);
        return;
      }
      case State::kAfterReasoning:
        if (!skip_leading_newlines()) return;
        delta.content += buffer_;
        buffer_.clear();
        return;
    }
  }
}

}  // namespace tern::chat
