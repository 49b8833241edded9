#include <stdexcept>

#include "elementwise/gated_activation.h"

namespace tern::kernels {

namespace {

__global__ void gated_activation_kernel(const __nv_bfloat16* gate_up, __nv_bfloat16* out, int64_t num_rows,
                                        int64_t width, GatedActivationSpec spec) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < num_rows * width;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = i / width;
    const int64_t c = i % width;
    float g = __bfloat162float(gate_up[r * 2 * width + c]);
    float u = __bfloat162float(gate_up[r * 2 * width + width + c]);
    if (spec.limit > 0.0f) {
      g = fminf(g, spec.limit);
      u = fminf(fmaxf(u, -spec.limit), spec.limit);
    }
    const float v = spec.gpt_oss ? (u + 1.0f) * (g / (1.0f + __expf(-g * spec.alpha))) : g / (1.0f + __expf(-g)) * u;
    out[i] = __float2bfloat16(v);
  }
}

}  // namespace

void launch_gated_activation(const __nv_bfloat16* gate_up, __nv_bfloat16* out, int64_t num_rows, int64_t width,
                             const GatedActivationSpec& spec, cudaStream_t stream) {
  if (width < 0 || num_rows < 0) throw std::invalid_argument("gated_activation: negative size");
  const int64_t count = num_rows * width;
  if (count == 0) return;
  constexpr int kThreads = 256;
  const int64_t blocks = (count + kThreads - 1) / kThreads;
  gated_activation_kernel<<<static_cast<unsigned>(blocks < 65535 * 16 ? blocks : 65535 * 16), kThreads, 0, stream>>>(
      gate_up, out, num_rows, width, spec);
}

}  // namespace tern::kernels
