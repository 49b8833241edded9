#include "core/nesting_limit.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"

namespace tern {

std::string nesting_limit_message() { return fmt::format("nesting deeper than {} levels", kMaxNestingDepth); }

NestingLevel::NestingLevel(int& depth, std::string_view what) : depth_(depth) {
  if (depth_ >= kMaxNestingDepth) fail("{}: {}", what, nesting_limit_message());
  ++depth_;
}

int json_nesting_depth(std::string_view text, int limit) {
  int depth = 0;
  int deepest = 0;
  bool in_string = false;
  bool escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
      if (deepest > limit) return deepest;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return deepest;
}

bool json_nesting_within_limit(std::string_view text) {
  return json_nesting_depth(text, kMaxNestingDepth) <= kMaxNestingDepth;
}

}  // namespace tern
