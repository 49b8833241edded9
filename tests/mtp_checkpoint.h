#pragma once
// The DeepSeek-V3 fixture has no multi-token prediction weights: these write copies of it with a next-n layer
// (model.layers.3, num_nextn_predict_layers 1) into a temporary directory, for tests of the MTP layer and of its
// drafts. Two kinds:
// - random: the layer's weights random (its blocks shaped as the fixture's layer 1, an MoE layer, which layer 3 is
//   too), its head its own (shared_head.head) and, with `own_embedding`, its embedding too; the target unchanged.
//   Its drafts are mostly rejected.
// - oracle: every attention and feed-forward block's output projection zeroed in the target and in the layer, so
//   that the target predicts from the last token alone (a bigram model: logits = lm_head(norm(embed(token)))), and
//   the layer set to compute exactly that for its token (eh_proj = [I, 0], enorm ones, the shared head the target's
//   final norm and lm_head): every greedy draft is the target's greedy token, and all are accepted.
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "fixtures.h"
#include "model/safetensors.h"

namespace tern::testing {

enum class MtpLayerKind { random, oracle };

// The temporary directory of the test checkpoint `name`, one per process (test cases may run in parallel processes),
// removed at exit; `fresh` while this process has not written it yet (then it is empty).
struct TestCheckpointDir {
  std::filesystem::path path;
  bool fresh = false;
};
inline TestCheckpointDir test_checkpoint_dir(const std::string& name) {
  struct Written {
    std::set<std::filesystem::path> dirs;
    ~Written() {
      std::error_code ignored;
      for (const auto& dir : dirs) std::filesystem::remove_all(dir, ignored);
    }
  };
  static Written written;
  const auto path = std::filesystem::temp_directory_path() / (name + "_" + std::to_string(::getpid()));
  if (!written.dirs.insert(path).second) return {path, false};
  std::filesystem::remove_all(path);
  std::filesystem::create_directories(path);
  return {path, true};
}

inline std::filesystem::path deepseek_v3_with_mtp(MtpLayerKind kind, bool own_embedding = false) {
  const auto [out, fresh] = test_checkpoint_dir(std::string("tern_deepseek_v3_mtp_") +
                                                (kind == MtpLayerKind::random ? "random" : "oracle") +
                                                (own_embedding ? "_own_embedding" : ""));
  if (!fresh) return out;
  const auto source = fixtures_dir() / "models" / "deepseek_v3";
  auto config = read_json(source / "config.json");
  config["num_nextn_predict_layers"] = 1;
  const int64_t num_layers = config["num_hidden_layers"].get<int64_t>();
  const int64_t hidden = config["hidden_size"].get<int64_t>();
  const int64_t vocab = config["vocab_size"].get<int64_t>();
  std::ofstream(out / "config.json") << config.dump(2);

  const auto fixture = SafetensorsFile::open(source / "model.safetensors");
  std::mt19937 rng(kind == MtpLayerKind::random ? 11 : 12);
  std::normal_distribution<float> normal(0.0f, 0.08f);
  std::map<std::string, NamedTensorF32> written_f32;  // new or replaced tensors, by name
  const auto values_of = [&](const std::string& name) {
    const TensorInfo& info = *fixture->find(name);
    std::vector<float> values(static_cast<size_t>(info.numel()));
    dequantize_to_f32(info, values.data());
    return values;
  };
  const auto put = [&](const std::string& name, std::vector<int64_t> shape, std::vector<float> values) {
    written_f32[name] = {name, std::move(shape), std::move(values)};
  };
  const auto random_values = [&](int64_t count, bool norm_weight) {
    std::vector<float> values(static_cast<size_t>(count));
    for (float& v : values) v = norm_weight ? 1.0f + 2.0f * normal(rng) : normal(rng);
    return values;
  };
  const auto is_output_projection = [](const std::string& name) {
    return name.find("o_proj.weight") != std::string::npos || name.find("down_proj.weight") != std::string::npos;
  };
  const std::string layer = "model.layers." + std::to_string(num_layers);
  // The layer's decoder blocks, shaped as layer 1's.
  const std::string model_layer = "model.layers.1.";
  for (const auto& [name, info] : fixture->tensors()) {
    if (name.rfind(model_layer, 0) != 0) continue;
    const std::string renamed = layer + "." + name.substr(model_layer.size());
    const bool norm_weight = name.find("norm") != std::string::npos;
    std::vector<float> values = random_values(info.numel(), norm_weight);
    if (kind == MtpLayerKind::oracle && is_output_projection(name)) std::fill(values.begin(), values.end(), 0.0f);
    put(renamed, info.shape, std::move(values));
  }
  if (kind == MtpLayerKind::oracle) {
    for (const auto& [name, info] : fixture->tensors()) {
      if (is_output_projection(name)) {
        put(name, info.shape, std::vector<float>(static_cast<size_t>(info.numel()), 0.0f));
      }
    }
    std::vector<float> eh_proj(static_cast<size_t>(hidden * 2 * hidden), 0.0f);
    for (int64_t i = 0; i < hidden; ++i) eh_proj[static_cast<size_t>(i * 2 * hidden + i)] = 1.0f;
    put(layer + ".eh_proj.weight", {hidden, 2 * hidden}, std::move(eh_proj));
    put(layer + ".enorm.weight", {hidden}, std::vector<float>(static_cast<size_t>(hidden), 1.0f));
    put(layer + ".hnorm.weight", {hidden}, random_values(hidden, true));
    put(layer + ".shared_head.norm.weight", {hidden}, values_of("model.norm.weight"));
    put(layer + ".shared_head.head.weight", {vocab, hidden}, values_of("lm_head.weight"));
  } else {
    put(layer + ".eh_proj.weight", {hidden, 2 * hidden}, random_values(hidden * 2 * hidden, false));
    put(layer + ".enorm.weight", {hidden}, random_values(hidden, true));
    // The hidden state weighs more than the token in the drafts, so that one read from the wrong row shows.
    std::vector<float> hnorm = random_values(hidden, true);
    for (float& v : hnorm) v *= 4.0f;
    put(layer + ".hnorm.weight", {hidden}, std::move(hnorm));
    put(layer + ".shared_head.norm.weight", {hidden}, random_values(hidden, true));
    put(layer + ".shared_head.head.weight", {vocab, hidden}, random_values(vocab * hidden, false));
  }
  if (own_embedding) put(layer + ".embed_tokens.weight", {vocab, hidden}, random_values(vocab * hidden, false));

  std::vector<TensorInfo> tensors;
  for (const auto& [name, info] : fixture->tensors()) {
    if (!written_f32.count(name)) tensors.push_back(info);
  }
  for (const auto& [name, t] : written_f32) {
    tensors.push_back({name, out / "model.safetensors", DType::F32, t.shape,
                       reinterpret_cast<const std::byte*>(t.values.data()), t.values.size() * sizeof(float), {}});
  }
  write_safetensors(out / "model.safetensors", tensors);
  return out;
}

}  // namespace tern::testing
