#pragma once
// Where the shared test fixtures are: $TERN_FIXTURES if set, else ../shared/fixtures beside the checkout.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

namespace tern::testing {

inline std::filesystem::path fixtures_dir() {
  if (const char* env = std::getenv("TERN_FIXTURES")) return env;
  return TERN_FIXTURES_DIR;
}

inline std::filesystem::path tern_binary() { return TERN_BINARY; }

inline nlohmann::json read_json(const std::filesystem::path& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

}  // namespace tern::testing
