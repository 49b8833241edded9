#pragma once
// The deepseek_v4 fixture without its discrete choices, for comparisons of two backends or formats at a tight
// tolerance: rounding can no longer send a near-tied expert or compressed entry the other way.
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "fixtures.h"
#include "model/safetensors.h"

namespace tern::testing {

// DeepSeek-V4 (mHC residual streams, CSA and HCA compressed attention with the Lightning Indexer, hash-routed and
// sqrt-softplus MoE layers) with no discrete choice left, as a temporary directory: every expert routed in every
// MoE layer (the hash layers' token->expert tables rewritten to list every expert) and the indexer keeping every
// compressed entry.
inline std::filesystem::path v4_without_choices(const std::filesystem::path& dir) {
  const auto out = std::filesystem::temp_directory_path() / "tern_v4_without_choices";
  std::filesystem::remove_all(out);
  std::filesystem::create_directories(out);
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const auto name = entry.path().filename();
    if (name != "config.json" && name != "model.safetensors") std::filesystem::create_symlink(entry.path(), out / name);
  }
  auto config = read_json(dir / "config.json");
  const int64_t num_experts = config.at("n_routed_experts").get<int64_t>();
  config["num_experts_per_tok"] = num_experts;
  config["index_topk"] = config.at("max_position_embeddings");
  std::ofstream(out / "config.json") << config.dump();

  const auto weights = SafetensorsFile::open(dir / "model.safetensors");
  std::vector<TensorInfo> tensors;
  std::vector<int32_t> every_expert;  // [vocab, experts]: each token lists every expert
  for (const auto& [name, info] : weights->tensors()) {
    tensors.push_back(info);
    if (!name.ends_with(".gate.tid2eid")) continue;
    const int64_t vocab = info.shape.at(0);
    if (every_expert.empty()) {
      for (int64_t t = 0; t < vocab; ++t) {
        for (int64_t e = 0; e < num_experts; ++e) every_expert.push_back(static_cast<int32_t>(e));
      }
    }
    tensors.back().dtype = DType::I32;
    tensors.back().shape = {vocab, num_experts};
    tensors.back().data = reinterpret_cast<const std::byte*>(every_expert.data());
    tensors.back().size_bytes = every_expert.size() * sizeof(int32_t);
  }
  write_safetensors(out / "model.safetensors", tensors);
  return out;
}

}  // namespace tern::testing
