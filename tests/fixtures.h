#pragma once
// Where the shared test fixtures are: $TERN_FIXTURES if set, else ../shared/fixtures beside the checkout; and the
// repo's own (tests/data, README.md there).
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

inline std::filesystem::path test_data_dir() { return TERN_TEST_DATA_DIR; }

inline std::filesystem::path tern_binary() { return TERN_BINARY; }

// How close tern's logits come to the shared fixtures' golden_logits (max |diff| / max |reference|). Those
// references rotate by bf16-rounded RoPE frequencies: make_model.py casts the whole module to bfloat16, and
// nn.Module.to rounds the inv_freq buffer with the weights, before its float64 copy. tern rotates by float32
// frequencies, as transformers' from_pretrained and vLLM do, which moves the fixtures' logits by up to 2.6e-3 by
// their 40th position (each fixture is within 3e-7 at position 0; the repo's own transformers fixtures, made with
// float32 frequencies, are checked far tighter).
inline constexpr double kSharedGoldenTolerance = 3e-3;

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
