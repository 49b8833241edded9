#include "chat/partial_tag.h"

#include <algorithm>

namespace tern::chat {

size_t partial_tag_suffix_len(std::string_view text, std::initializer_list<std::string_view> tags) {
  size_t longest = 0;
  for (std::string_view tag : tags) {
    if (tag.empty()) continue;
    for (size_t len = std::min(text.size(), tag.size() - 1); len > longest; --len) {
      if (text.substr(text.size() - len) == tag.substr(0, len)) {
        longest = len;
        break;
      }
    }
  }
  return longest;
}

}  // namespace tern::chat
