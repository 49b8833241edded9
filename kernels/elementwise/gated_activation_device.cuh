#pragma once
// The gated activation of one (gate, up) pair: shared by the elementwise kernel and the MoE kernels that apply it
// where gate and up are computed or found (moe_experts.cu).
#include "elementwise/gated_activation.h"

namespace tern::kernels {

__device__ __forceinline__ float gated_activation(float gate, float up, const GatedActivationSpec& spec) {
  if (spec.limit > 0.0f) {
    gate = fminf(gate, spec.limit);
    up = fminf(fmaxf(up, -spec.limit), spec.limit);
  }
  return spec.gpt_oss ? (up + 1.0f) * (gate / (1.0f + __expf(-gate * spec.alpha)))
                      : gate / (1.0f + __expf(-gate)) * up;
}

}  // namespace tern::kernels
