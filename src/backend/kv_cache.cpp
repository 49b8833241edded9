#include "backend/kv_cache.h"

#include <map>
#include <set>

#include "core/error.h"

namespace tern {

KvCacheDtype parse_kv_cache_dtype(const std::string& name) {
  if (name == "auto") return KvCacheDtype::automatic;
  if (name == "fp8" || name == "fp8_e4m3") return KvCacheDtype::fp8_e4m3;
  fail("unknown KV cache dtype '{}' (choices: auto, fp8, fp8_e4m3)", name);
}

const char* kv_cache_dtype_name(KvCacheDtype dtype) {
  return dtype == KvCacheDtype::fp8_e4m3 ? "fp8_e4m3" : "auto";
}

namespace {

bool same_bytes_per_token(const KvLayerSpec& a, const KvLayerSpec& b) {
  return a.num_kv_heads == b.num_kv_heads && a.key_dim == b.key_dim && a.value_dim == b.value_dim &&
         a.state_dim == b.state_dim;
}

}  // namespace

std::vector<KvCacheGroup> kv_cache_groups(const std::vector<KvLayerSpec>& layers) {
  KvCacheGroup keep_all, sliding;
  std::set<int64_t> windows;
  for (int i = 0; i < static_cast<int>(layers.size()); ++i) {
    if (layers[i].kind == KvLayerKind::sliding_window && layers[i].sliding_window_tokens > 0) {
      sliding.layers.push_back(i);
      windows.insert(layers[i].sliding_window_tokens);
    } else {
      keep_all.layers.push_back(i);
    }
  }
  KvCacheGroup all;
  for (int i = 0; i < static_cast<int>(layers.size()); ++i) all.layers.push_back(i);
  if (windows.size() != 1) return {all};
  sliding.sliding_window_tokens = *windows.begin();
  if (keep_all.layers.empty()) return {sliding};
  if (keep_all.layers.size() != sliding.layers.size()) return {all};
  for (size_t j = 0; j < sliding.layers.size(); ++j) {
    if (!same_bytes_per_token(layers[keep_all.layers[j]], layers[sliding.layers[j]])) return {all};
  }
  return {keep_all, sliding};
}

KvCacheShape kv_cache_shape(const std::vector<KvLayerSpec>& layers, int64_t num_blocks, int64_t block_size) {
  KvCacheShape shape;
  shape.cache.num_blocks = num_blocks;
  shape.cache.block_size = block_size;
  shape.cache.layers = layers;
  shape.cache.groups = kv_cache_groups(layers);
  shape.cache.layer_group.assign(layers.size(), 0);
  shape.storage_layer.resize(layers.size());
  for (size_t g = 0; g < shape.cache.groups.size(); ++g) {
    const auto& group_layers = shape.cache.groups[g].layers;
    for (size_t j = 0; j < group_layers.size(); ++j) {
      shape.cache.layer_group[group_layers[j]] = static_cast<int>(g);
      shape.storage_layer[group_layers[j]] = shape.cache.groups[0].layers[j];
    }
  }
  return shape;
}

int64_t kv_bytes_per_token(const std::vector<KvLayerSpec>& layers, int64_t element_bytes) {
  int64_t total = 0;
  const auto groups = kv_cache_groups(layers);
  for (int i : groups.front().layers) {
    const KvLayerSpec& layer = layers[i];
    total += (layer.num_kv_heads * (layer.key_dim + layer.value_dim) + layer.state_dim) * element_bytes;
  }
  return total;
}

std::string kv_layers_summary(const std::vector<KvLayerSpec>& layers) {
  static const std::map<KvLayerKind, const char*> names = {{KvLayerKind::full, "full"},
                                                          {KvLayerKind::sliding_window, "sliding window"},
                                                          {KvLayerKind::mla_latent, "MLA latent"},
                                                          {KvLayerKind::compressed, "compressed"}};
  std::map<KvLayerKind, int> counts;
  for (const auto& layer : layers) ++counts[layer.kind];
  std::string summary;
  for (const auto& [kind, count] : counts) {
    summary += (summary.empty() ? "" : ", ") + std::to_string(count) + " " + names.at(kind);
  }
  return summary;
}

int64_t shareable_prefix_tokens(const std::vector<KvLayerSpec>& layers) {
  int64_t limit = 0;
  for (const auto& layer : layers) {
    if (layer.shareable_prefix_tokens > 0 && (limit == 0 || layer.shareable_prefix_tokens < limit)) {
      limit = layer.shareable_prefix_tokens;
    }
  }
  return limit;
}

std::vector<int64_t> group_sliding_windows(const std::vector<KvCacheGroup>& groups) {
  std::vector<int64_t> windows;
  for (const auto& group : groups) windows.push_back(group.sliding_window_tokens);
  return windows;
}

}  // namespace tern
