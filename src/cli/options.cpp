#include "cli/options.h"

#include <charconv>

#include "core/error.h"

namespace tern::cli {

std::vector<int32_t> parse_token_ids(const std::string& text) {
  std::vector<int32_t> ids;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(',', start);
    if (end == std::string::npos) end = text.size();
    int32_t id = 0;
    const char* first = text.data() + start;
    const char* last = text.data() + end;
    while (first < last && *first == ' ') ++first;
    while (last > first && last[-1] == ' ') --last;
    auto [ptr, ec] = std::from_chars(first, last, id);
    if (first == last || ec != std::errc() || ptr != last || id < 0) {
      fail("--prompt-ids: '{}' is not a non-negative token id (expected e.g. 1,2,3)", std::string(first, last));
    }
    ids.push_back(id);
    start = end + 1;
  }
  return ids;
}

}  // namespace tern::cli
