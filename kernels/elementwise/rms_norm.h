#pragma once
// RMSNorm over the last dimension, optionally fused with the residual add that precedes it in a decoder layer.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace tern::kernels {

struct RmsNormParams {
  const __nv_bfloat16* x = nullptr;       // [num_rows, width]
  __nv_bfloat16* residual = nullptr;      // [num_rows, width] or null; when set: residual += x, out = norm(residual)
  const __nv_bfloat16* weight = nullptr;  // [width]
  __nv_bfloat16* out = nullptr;           // [num_rows, width]
  int num_rows = 0;
  int width = 0;
  float eps = 1e-6f;
};

void launch_rms_norm(const RmsNormParams& params, cudaStream_t stream);

}  // namespace tern::kernels
