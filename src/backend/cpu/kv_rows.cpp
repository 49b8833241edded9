#include "backend/cpu/kv_rows.h"

#include <array>
#include <cstring>

#include "core/dtype.h"
#include "core/error.h"

namespace tern::cpu {

namespace {

const std::array<float, 256>& e4m3_values() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> values{};
    for (int code = 0; code < 256; ++code) values[code] = f8_e4m3_to_f32(static_cast<uint8_t>(code));
    return values;
  }();
  return table;
}

[[noreturn]] void unsupported_kv_dtype(const Tensor& cache) {
  fail("kv cache: the CPU backend stores keys and values as F32 or F8_E4M3, not {}", dtype_name(cache.dtype));
}

}  // namespace

void store_kv_values(const Tensor& cache, int64_t offset, const float* values, int64_t count, float scale) {
  if (cache.dtype == DType::F32) {
    std::memcpy(cache.ptr<float>() + offset, values, count * sizeof(float));
    return;
  }
  if (cache.dtype != DType::F8_E4M3) unsupported_kv_dtype(cache);
  uint8_t* codes = cache.ptr<uint8_t>() + offset;
  for (int64_t i = 0; i < count; ++i) codes[i] = f32_to_f8_e4m3(values[i] / scale);
}

const float* kv_values(const Tensor& cache, int64_t offset, int64_t count, float scale, float* scratch) {
  if (cache.dtype == DType::F32) return cache.ptr<float>() + offset;
  if (cache.dtype != DType::F8_E4M3) unsupported_kv_dtype(cache);
  const auto& table = e4m3_values();
  const uint8_t* codes = cache.ptr<uint8_t>() + offset;
  for (int64_t i = 0; i < count; ++i) scratch[i] = table[codes[i]] * scale;
  return scratch;
}

}  // namespace tern::cpu
