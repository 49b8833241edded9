#include "engine/reasoning_end_detector.h"

#include <utility>

namespace tern {

ReasoningEndDetector::ReasoningEndDetector(ReasoningEndMarker marker)
    : marker_(std::move(marker)),
      window_len_(marker_.prefix.size() + marker_.suffix.size() +
                  (marker_.suffix.empty() ? 0 : static_cast<size_t>(marker_.max_tokens_between))) {}

bool ReasoningEndDetector::feed(int32_t token_id) {
  if (ended_) return true;
  recent_.push_back(token_id);
  if (recent_.size() > window_len_) recent_.pop_front();
  ended_ = recent_end_with_marker();
  return ended_;
}

bool ReasoningEndDetector::recent_end_with(const std::vector<int32_t>& part, size_t tokens_after) const {
  if (recent_.size() < part.size() + tokens_after) return false;
  const size_t start = recent_.size() - tokens_after - part.size();
  for (size_t i = 0; i < part.size(); ++i) {
    if (recent_[start + i] != part[i]) return false;
  }
  return true;
}

bool ReasoningEndDetector::recent_end_with_marker() const {
  if (marker_.suffix.empty()) return recent_end_with(marker_.prefix, 0);
  // The suffix completes with this token; the prefix ends at most max_tokens_between tokens before it starts.
  if (!recent_end_with(marker_.suffix, 0)) return false;
  for (size_t gap = 0; gap <= static_cast<size_t>(marker_.max_tokens_between); ++gap) {
    if (recent_end_with(marker_.prefix, marker_.suffix.size() + gap)) return true;
  }
  return false;
}

}  // namespace tern
