#pragma once
// The DeepSeek-V4 fixture has no MTP weights (transformers drops mtp.*): this writes a copy of it in the names of
// DeepSeek's released layout (v4_released_name: embed.weight, layers.<i>.*, hc_head_*; the values as stored, not
// quantized) with an MTP block mtp.0.* into a temporary directory, for the tests of the V4 MTP layer and of its
// drafts. The block's attention and MoE tensors are shaped as the fixture's layer 1 (CSA, a non-hash MoE layer);
// config.json's layer_types lists the MTP layer's attention kind after the layers' (as the released compress_ratios
// does), sliding or CSA. Two kinds (mtp_checkpoint.h's):
// - random: the block's weights random, the target unchanged. Its drafts are mostly rejected.
// - oracle: every block's output projection (attn.wo_b, the experts' and shared expert's w2) zeroed in the target
//   and in the block. The streams then stay positive multiples of the embedding (the mHC stream mix has positive
//   entries), which the head's collapse and norm take back to norm(embed(token)): the target is a bigram model. The
//   block computes the same from its token (e_proj = I, enorm ones, h_proj = 0, its norm the target's final norm):
//   every greedy draft is the target's greedy token.

#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "fixtures.h"
#include "model/arch/deepseek_v4/v4_checkpoint_names.h"
#include "model/safetensors.h"
#include "mtp_checkpoint.h"

namespace tern::testing {

inline std::filesystem::path deepseek_v4_with_mtp(const std::string& mtp_layer_type,
                                                  MtpLayerKind kind = MtpLayerKind::random) {
  const bool oracle = kind == MtpLayerKind::oracle;
  const auto [out, fresh] =
      test_checkpoint_dir("tern_deepseek_v4_mtp_" + mtp_layer_type + (oracle ? "_oracle" : "_random"));
  if (!fresh) return out;
  const auto source = fixtures_dir() / "models" / "deepseek_v4";
  auto config = read_json(source / "config.json");
  config["num_nextn_predict_layers"] = 1;
  config["layer_types"].push_back(mtp_layer_type);
  const int64_t hidden = config["hidden_size"].get<int64_t>();
  const int64_t streams = config["hc_mult"].get<int64_t>();
  std::ofstream(out / "config.json") << config.dump(2);

  const auto fixture = SafetensorsFile::open(source / "model.safetensors");
  std::mt19937 rng(17);
  std::normal_distribution<float> normal(0.0f, 0.08f);
  const auto random_values = [&](int64_t count, bool norm_weight) {
    std::vector<float> values(static_cast<size_t>(count));
    for (float& v : values) v = norm_weight ? 1.0f + 2.0f * normal(rng) : normal(rng);
    return values;
  };
  std::vector<NamedTensorF32> mtp;
  const auto put = [&](const std::string& name, std::vector<int64_t> shape, std::vector<float> values) {
    mtp.push_back({name, std::move(shape), std::move(values)});
  };
  const auto is_output_projection = [](const std::string& name) {
    return name.ends_with("attn.wo_b.weight") || name.ends_with("w2.weight");
  };
  const auto zeros = [](int64_t count) { return std::vector<float>(static_cast<size_t>(count), 0.0f); };
  std::vector<TensorInfo> tensors;
  const std::string source_layer = "layers.1.";
  for (const auto& [name, info] : fixture->tensors()) {
    TensorInfo renamed = info;
    renamed.name = v4_released_name(name);
    if (oracle && is_output_projection(renamed.name)) {
      put(renamed.name, info.shape, zeros(info.numel()));
    } else {
      tensors.push_back(renamed);
    }
    if (!renamed.name.starts_with(source_layer)) continue;
    const std::string leaf = renamed.name.substr(source_layer.size());
    const bool norm_weight = leaf.find("norm") != std::string::npos;
    put("mtp.0." + leaf, info.shape,
        oracle && is_output_projection(leaf) ? zeros(info.numel()) : random_values(info.numel(), norm_weight));
  }
  if (oracle) {
    std::vector<float> identity = zeros(hidden * hidden);
    for (int64_t i = 0; i < hidden; ++i) identity[static_cast<size_t>(i * hidden + i)] = 1.0f;
    put("mtp.0.e_proj.weight", {hidden, hidden}, std::move(identity));
    put("mtp.0.h_proj.weight", {hidden, hidden}, zeros(hidden * hidden));
    put("mtp.0.enorm.weight", {hidden}, std::vector<float>(static_cast<size_t>(hidden), 1.0f));
    put("mtp.0.hnorm.weight", {hidden}, random_values(hidden, true));
    const TensorInfo& final_norm = *fixture->find("model.norm.weight");
    std::vector<float> norm(static_cast<size_t>(hidden));
    dequantize_to_f32(final_norm, norm.data());
    put("mtp.0.norm.weight", {hidden}, std::move(norm));
  } else {
    put("mtp.0.e_proj.weight", {hidden, hidden}, random_values(hidden * hidden, false));
    put("mtp.0.h_proj.weight", {hidden, hidden}, random_values(hidden * hidden, false));
    put("mtp.0.enorm.weight", {hidden}, random_values(hidden, true));
    // The hidden state weighs more than the token in the drafts, so that one read from the wrong row shows.
    std::vector<float> hnorm = random_values(hidden, true);
    for (float& v : hnorm) v *= 4.0f;
    put("mtp.0.hnorm.weight", {hidden}, std::move(hnorm));
    put("mtp.0.norm.weight", {hidden}, random_values(hidden, true));
  }
  put("mtp.0.hc_head_fn", {streams, streams * hidden}, random_values(streams * streams * hidden, false));
  put("mtp.0.hc_head_base", {streams}, random_values(streams, false));
  put("mtp.0.hc_head_scale", {1}, random_values(1, true));
  for (const auto& t : mtp) {
    tensors.push_back({t.name, out / "model.safetensors", DType::F32, t.shape,
                       reinterpret_cast<const std::byte*>(t.values.data()), t.values.size() * sizeof(float), {}});
  }
  write_safetensors(out / "model.safetensors", tensors);
  return out;
}

}  // namespace tern::testing
