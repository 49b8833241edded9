#pragma once
// Greedy sampling on the device: the index of the largest logit of each row (the first one on ties), so only
// token ids travel back to the host.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace tern::kernels {

void launch_argmax_bf16(const __nv_bfloat16* logits, int32_t* out, int num_rows, int vocab, cudaStream_t stream);
void launch_argmax_f32(const float* logits, int32_t* out, int num_rows, int vocab, cudaStream_t stream);

}  // namespace tern::kernels
