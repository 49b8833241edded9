#include "backend/kv_cache.h"

namespace tern {

int64_t kv_bytes_per_token(const std::vector<KvLayerSpec>& layers, int64_t element_bytes) {
  int64_t total = 0;
  for (const auto& layer : layers) total += (layer.num_kv_heads * (layer.key_dim + layer.value_dim) + layer.state_dim) * element_bytes;
  return total;
}

}  // namespace tern
