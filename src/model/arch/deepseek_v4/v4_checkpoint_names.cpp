#include "model/arch/deepseek_v4/v4_checkpoint_names.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <string_view>

#include "core/error.h"

namespace tern {

namespace {

constexpr std::string_view kTransformersLayers = "model.layers.";
constexpr std::string_view kTransformersKvNorm = "attn.norm.weight";
constexpr std::string_view kReleasedKvNorm = "attn.kv_norm.weight";

}  // namespace

V4CheckpointNames v4_checkpoint_names(const Checkpoint& checkpoint) {
  if (checkpoint.has("embed.weight")) {
    return {true, "embed.weight", "layers", "norm.weight", {"head.weight"}, "hc_head_fn", "hc_head_base",
            "hc_head_scale", "kv_norm"};
  }
  return {false, "model.embed_tokens.weight", "model.layers", "model.norm.weight", {"head.weight", "lm_head.weight"},
          "model.hc_head.hc_fn", "model.hc_head.hc_base", "model.hc_head.hc_scale", "norm"};
}

std::string v4_released_name(const std::string& name) {
  static const std::map<std::string, std::string, std::less<>> top_level = {
      {"model.embed_tokens.weight", "embed.weight"},
      {"model.norm.weight", "norm.weight"},
      {"head.weight", "head.weight"},
      {"lm_head.weight", "head.weight"},
      {"model.hc_head.hc_fn", "hc_head_fn"},
      {"model.hc_head.hc_base", "hc_head_base"},
      {"model.hc_head.hc_scale", "hc_head_scale"},
  };
  if (const auto it = top_level.find(name); it != top_level.end()) return it->second;
  const auto not_v4 = [&] {
    fail("tensor '{}' is not a DeepSeek-V4 tensor as transformers names them (model.embed_tokens, model.norm, "
         "head, model.hc_head.*, model.layers.<i>.*)", name);
  };
  if (!name.starts_with(kTransformersLayers)) not_v4();
  const std::string_view rest = std::string_view(name).substr(kTransformersLayers.size());  // "<i>.<leaf>"
  const size_t dot = rest.find('.');
  const std::string_view index = rest.substr(0, dot);
  if (dot == std::string_view::npos || index.empty() ||
      !std::all_of(index.begin(), index.end(), [](unsigned char c) { return std::isdigit(c); })) {
    not_v4();
  }
  const std::string_view leaf = rest.substr(dot + 1);
  return "layers." + std::string(index) + "." + std::string(leaf == kTransformersKvNorm ? kReleasedKvNorm : leaf);
}

}  // namespace tern
