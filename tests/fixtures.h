#pragma once
// Where the shared test fixtures are: $TERN_FIXTURES if set, else ../shared/fixtures beside the checkout.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

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

// The MoE fixture model in `dir` with num_experts_per_tok raised to its expert count, as a temporary directory
// named after `tag` (the other files linked): routing is then no choice, so bf16 rounding cannot swap a near-tied
// expert, and comparisons of two backends or layouts check the whole MoE path at a tight tolerance.
inline std::filesystem::path every_expert_routed(const std::filesystem::path& dir, const std::string& tag) {
  const auto out = std::filesystem::temp_directory_path() / ("tern_every_expert_" + tag);
  std::filesystem::remove_all(out);
  std::filesystem::create_directories(out);
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().filename() == "config.json") continue;
    std::filesystem::create_symlink(entry.path(), out / entry.path().filename());
  }
  auto config = read_json(dir / "config.json");
  config["num_experts_per_tok"] = config.contains("n_routed_experts") ? config["n_routed_experts"]
                                                                      : config["num_local_experts"];
  // DeepSeek's group-limited choice would otherwise still exclude the experts of the groups not chosen.
  if (config.contains("n_group")) config["topk_group"] = config["n_group"];
  std::ofstream(out / "config.json") << config.dump();
  return out;
}

}  // namespace tern::testing
