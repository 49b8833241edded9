#pragma once
// Parsing helpers shared by the subcommands.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tern::cli {

// "1,2,3" -> {1, 2, 3}; fails on anything that is not a comma-separated list of non-negative integers.
std::vector<int32_t> parse_token_ids(const std::string& text);

// The API key an option such as --api-key sets: `value` when the option was given (`given`), else $`env_name`
// when that is set, else none. A key given but empty (an unset shell variable, `--api-key "$KEY"`), or otherwise
// unusable, fails naming the option or variable instead of silently switching authentication off.
std::optional<std::string> api_key_setting(bool given, const std::string& value, std::string_view option,
                                           const char* env_name);

}  // namespace tern::cli
