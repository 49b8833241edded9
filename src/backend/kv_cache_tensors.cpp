#include "backend/kv_cache_tensors.h"

#include "core/error.h"

namespace tern {

KvCache allocate_kv_cache_tensors(const std::vector<KvLayerSpec>& layers, int64_t num_blocks, int64_t block_size,
                                  DType kv_dtype, const KvTensorAllocator& allocate) {
  if (num_blocks <= 0 || block_size <= 0) fail("allocate_kv_cache: {} blocks of {} tokens", num_blocks, block_size);
  auto [cache, storage_layer] = kv_cache_shape(layers, num_blocks, block_size);
  const int64_t slots = num_blocks * block_size;
  cache.keys.resize(layers.size());
  cache.values.resize(layers.size());
  cache.states.resize(layers.size());
  for (size_t i = 0; i < layers.size(); ++i) {
    if (storage_layer[i] != static_cast<int>(i)) continue;
    cache.keys[i] = allocate(kv_dtype, {slots, layers[i].num_kv_heads, layers[i].key_dim});
    cache.values[i] = allocate(kv_dtype, {slots, layers[i].num_kv_heads, layers[i].value_dim});
    cache.states[i] = allocate(DType::F32, {slots, layers[i].state_dim});
  }
  for (size_t i = 0; i < layers.size(); ++i) {
    const auto shared = static_cast<size_t>(storage_layer[i]);
    cache.keys[i] = cache.keys[shared];
    cache.values[i] = cache.values[shared];
    cache.states[i] = cache.states[shared];
  }
  return cache;
}

}  // namespace tern
