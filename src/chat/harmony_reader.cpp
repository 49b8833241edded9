#include "chat/harmony_reader.h"

#include <initializer_list>

#include "chat/partial_tag.h"

namespace tern::chat {
namespace {

constexpr std::string_view kStart = "<|start|>";
constexpr std::string_view kChannel = "<|channel|>";
constexpr std::string_view kMessage = "<|message|>";
constexpr std::string_view kEnd = "<|end|>";
constexpr std::string_view kCall = "<|call|>";
constexpr std::string_view kReturn = "<|return|>";

// The word after `key` in a header, up to whitespace or the next marker; empty if `key` is absent.
std::string header_word(std::string_view header, std::string_view key) {
  size_t at = header.find(key);
  if (at == std::string_view::npos) return "";
  std::string_view rest = header.substr(at + key.size());
  size_t end = rest.find_first_of(" \t\n<");
  return std::string(rest.substr(0, end));
}

// Where the first of `markers` stands in `text` (npos if none), and its length.
size_t find_first_marker(std::string_view text, std::initializer_list<std::string_view> markers, size_t& marker_len) {
  size_t first = std::string_view::npos;
  for (std::string_view marker : markers) {
    size_t at = text.find(marker);
    if (at < first) {
      first = at;
      marker_len = marker.size();
    }
  }
  return first;
}

}  // namespace

std::vector<HarmonyEvent> HarmonyReader::feed(std::string_view text) {
  buffer_ += text;
  std::vector<HarmonyEvent> events;
  process(events, false);
  return events;
}

std::vector<HarmonyEvent> HarmonyReader::flush() {
  std::vector<HarmonyEvent> events;
  process(events, true);
  return events;
}

void HarmonyReader::process(std::vector<HarmonyEvent>& events, bool final) {
  while (true) {
    switch (state_) {
      case State::kOutside: {
        size_t marker_len = 0;
        size_t start = find_first_marker(buffer_, {kStart, kChannel}, marker_len);
        size_t text_len = start;
        if (start == std::string::npos) {
          text_len = buffer_.size() - (final ? 0 : partial_tag_suffix_len(buffer_, {kStart, kChannel}));
        }
        if (text_len > 0) events.push_back({HarmonyEvent::Kind::kText, buffer_.substr(0, text_len), "", ""});
        buffer_.erase(0, text_len);
        if (start == std::string::npos) return;
        state_ = State::kHeader;
        continue;
      }
      case State::kHeader: {
        size_t message = buffer_.find(kMessage);
        if (message == std::string::npos) {
          if (final && !buffer_.empty()) {
            events.push_back({HarmonyEvent::Kind::kText, std::move(buffer_), "", ""});
            buffer_.clear();
            state_ = State::kOutside;
          }
          return;
        }
        std::string header = buffer_.substr(0, message + kMessage.size());
        buffer_.erase(0, header.size());
        std::string_view fields = std::string_view(header).substr(0, message);
        events.push_back(
            {HarmonyEvent::Kind::kHeader, header, header_word(fields, kChannel), header_word(fields, "to=")});
        state_ = State::kBody;
        continue;
      }
      case State::kBody: {
        size_t marker_len = 0;
        size_t end = find_first_marker(buffer_, {kEnd, kCall, kReturn}, marker_len);
        size_t body_len = end;
        if (end == std::string::npos) {
          body_len = buffer_.size() - (final ? 0 : partial_tag_suffix_len(buffer_, {kEnd, kCall, kReturn}));
        }
        if (body_len > 0) events.push_back({HarmonyEvent::Kind::kBody, buffer_.substr(0, body_len), "", ""});
        buffer_.erase(0, body_len);
        if (end == std::string::npos) {
          if (final) {
            events.push_back({HarmonyEvent::Kind::kEnd, "", "", ""});
            state_ = State::kOutside;
          }
          return;
        }
        events.push_back({HarmonyEvent::Kind::kEnd, buffer_.substr(0, marker_len), "", ""});
        buffer_.erase(0, marker_len);
        state_ = State::kOutside;
        continue;
      }
    }
  }
}

}  // namespace tern::chat
