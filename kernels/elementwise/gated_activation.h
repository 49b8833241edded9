#pragma once
// Gated activations of a [rows, 2 * width] gate/up tensor (gate half first): SwiGLU with optional clamping and
// gpt-oss's GLU, for the MoE experts and MLPs that silu_mul does not cover.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace tern::kernels {

struct GatedActivationSpec {
  bool gpt_oss = false;  // (up + 1) * gate * sigmoid(alpha * gate), else silu(gate) * up
  float limit = 0.0f;    // > 0: gate clamped to (-inf, limit], up to [-limit, limit] first
  float alpha = 1.702f;
};

void launch_gated_activation(const __nv_bfloat16* gate_up, __nv_bfloat16* out, int64_t num_rows, int64_t width,
                             const GatedActivationSpec& spec, cudaStream_t stream);

}  // namespace tern::kernels
