#pragma once
// A KV cache with its tensors, as every backend lays it out (kv_cache_shape): per layer, keys and values of
// `kv_dtype` and layer state in float32 (DeepSeek-V4's compressors pool it with a softmax, the indexer scores it);
// the layers of a second KV cache group share the tensors of the first group's layer they pair with. Backends differ
// only in where the memory comes from (host, device, pinned host for the host tier).
#include <cstdint>
#include <functional>
#include <vector>

#include "backend/kv_cache.h"

namespace tern {

using KvTensorAllocator = std::function<Tensor(DType dtype, std::vector<int64_t> shape)>;

KvCache allocate_kv_cache_tensors(const std::vector<KvLayerSpec>& layers, int64_t num_blocks, int64_t block_size,
                                  DType kv_dtype, const KvTensorAllocator& allocate);

}  // namespace tern
