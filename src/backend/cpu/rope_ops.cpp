// Rotary position embedding on the CPU: rotate-half or interleaved pairs, on the leading or trailing dims.
#include <cmath>

#include "backend/cpu/host_tensor.h"
#include "core/error.h"

namespace tern::cpu {

void rope_at(Tensor& x, const RopeTable& table, std::span<const int32_t> positions, bool inverse) {
  if (x.dtype != DType::F32) fail("rope: expects float32 activations");
  const int64_t num_tokens = x.size(0);
  const int64_t num_heads = x.size(1);
  const int64_t head_dim = x.size(2);
  if (static_cast<int64_t>(positions.size()) != num_tokens) {
    fail("rope: {} positions for {} tokens", positions.size(), num_tokens);
  }
  if (table.rotary_dim > head_dim) fail("rope: rotary dim {} exceeds head dim {}", table.rotary_dim, head_dim);
  const int64_t half = table.rotary_dim / 2;
  const int64_t first = table.rotate_last_dims ? head_dim - table.rotary_dim : 0;
  const float* inv_freq = table.inv_freq.ptr<float>();
  const float sign = inverse ? -1.0f : 1.0f;
  std::vector<float> cos_v(half), sin_v(half);
  for (int64_t t = 0; t < num_tokens; ++t) {
    const float pos = static_cast<float>(positions[t]);
    for (int64_t i = 0; i < half; ++i) {
      const float angle = pos * inv_freq[i];  // float32 product, as transformers computes it
      cos_v[i] = std::cos(angle) * table.attention_scaling;
      sin_v[i] = sign * std::sin(angle) * table.attention_scaling;
    }
    for (int64_t h = 0; h < num_heads; ++h) {
      float* v = x.ptr<float>() + (t * num_heads + h) * head_dim + first;
      for (int64_t i = 0; i < half; ++i) {
        const int64_t ia = table.interleaved ? 2 * i : i;
        const int64_t ib = table.interleaved ? 2 * i + 1 : i + half;
        const float a = v[ia], b = v[ib];
        v[ia] = a * cos_v[i] - b * sin_v[i];
        v[ib] = b * cos_v[i] + a * sin_v[i];
      }
    }
  }
}

}  // namespace tern::cpu
