#include <stdexcept>

#include "elementwise/gated_activation.h"
#include "elementwise/gated_activation_device.cuh"

namespace tern::kernels {

namespace {

__global__ void gated_activation_kernel(const __nv_bfloat16* gate_up, __nv_bfloat16* out, int64_t num_rows,
                                        int64_t width, GatedActivationSpec spec) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < num_rows * width;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = i / width;
    const int64_t c = i % width;
    out[i] = __float2bfloat16(gated_activation(__bfloat162float(gate_up[r * 2 * width + c]),
                                               __bfloat162float(gate_up[r * 2 * width + width + c]), spec));
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
