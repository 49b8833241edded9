#include "backend/kv_cache.h"

#include <map>

namespace tern {

int64_t kv_bytes_per_token(const std::vector<KvLayerSpec>& layers, int64_t element_bytes) {
  int64_t total = 0;
  for (const auto& layer : layers) {
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

}  // namespace tern
