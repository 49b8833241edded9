#pragma once
// Parsing helpers shared by the subcommands.
#include <cstdint>
#include <string>
#include <vector>

namespace tern::cli {

// "1,2,3" -> {1, 2, 3}; fails on anything that is not a comma-separated list of non-negative integers.
std::vector<int32_t> parse_token_ids(const std::string& text);

}  // namespace tern::cli
