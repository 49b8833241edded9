#include "cli/options.h"

#include <charconv>
#include <cstdlib>

#include "core/error.h"
#include "server/bearer_auth.h"

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

std::optional<std::string> api_key_setting(bool given, const std::string& value, std::string_view option,
                                           const char* env_name) {
  if (given) {
    server::check_api_key_value(value, option);
    return value;
  }
  const char* env = std::getenv(env_name);
  if (!env) return std::nullopt;
  server::check_api_key_value(env, fmt::format("${} (the default of {})", env_name, option));
  return std::string(env);
}

}  // namespace tern::cli
