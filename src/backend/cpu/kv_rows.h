#pragma once
// Rows of a KV cache tensor as the CPU's attention ops read and write them, whatever the cache stores: float32, or
// e4m3 codes of value / the layer's per-tensor scale (KvCacheDtype::fp8_e4m3).
#include <cstdint>

#include "backend/tensor.h"

namespace tern::cpu {

// Stores `count` floats at element `offset` of a KV cache tensor: copied into a float32 cache, or as the nearest
// e4m3 codes of value / scale (saturating at +-448) into an FP8 one.
void store_kv_values(const Tensor& cache, int64_t offset, const float* values, int64_t count, float scale);

// `count` values from element `offset` of a KV cache tensor as float32: a pointer into a float32 cache, or an FP8
// cache's codes times scale decoded into `scratch` (room for `count` floats).
const float* kv_values(const Tensor& cache, int64_t offset, int64_t count, float scale, float* scratch);

}  // namespace tern::cpu
