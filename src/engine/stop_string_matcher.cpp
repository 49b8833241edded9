#include "engine/stop_string_matcher.h"

#include <algorithm>

namespace tern {

StopStringMatcher::StopStringMatcher(std::vector<std::string> stop_strings) : stop_strings_(std::move(stop_strings)) {}

StopStringMatcher::Result StopStringMatcher::push(std::string_view delta) {
  pending_.append(delta);
  // pending_ is at most the held-back tail plus this delta, so a search of all of it finds matches that began in
  // earlier deltas.
  size_t first_match = std::string::npos;
  for (const auto& stop : stop_strings_) first_match = std::min(first_match, pending_.find(stop));
  if (first_match != std::string::npos) {
    Result result{pending_.substr(0, first_match), true};
    pending_.clear();
    return result;
  }
  size_t held = 0;
  for (const auto& stop : stop_strings_) {
    for (size_t len = std::min(stop.size() - 1, pending_.size()); len > held; --len) {
      if (std::string_view(pending_).substr(pending_.size() - len) == std::string_view(stop).substr(0, len)) {
        held = len;
        break;
      }
    }
  }
  Result result{pending_.substr(0, pending_.size() - held), false};
  pending_.erase(0, pending_.size() - held);
  return result;
}

std::string StopStringMatcher::flush() {
  std::string rest = std::move(pending_);
  pending_.clear();
  return rest;
}

}  // namespace tern
