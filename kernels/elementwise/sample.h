#pragma once
// Random sampling on the device with temperature, top-k and top-p, so that only token ids travel back to the
// host. The kept set is every token whose logit is at least a threshold: the k-th largest logit (ties kept),
// then, within that set, the smallest threshold whose softmax mass reaches top_p. Thresholds are found exactly by
// bisection over the 16-bit order of bf16 values. A row draws the token where its `uniform` falls in the kept
// tokens' cumulative softmax(logits / temperature), in vocabulary order.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace tern::kernels {

struct RowSampling {
  float temperature = 1.0f;  // <= 0: greedy (the first largest logit)
  int32_t top_k = 0;         // <= 0 or >= vocab: all
  float top_p = 1.0f;        // >= 1: all
  float uniform = 0.0f;      // in [0, 1): the row's random draw
};

// logits [num_rows, vocab] bf16, rows [num_rows] (device), out [num_rows] int32.
void launch_sample_bf16(const __nv_bfloat16* logits, const RowSampling* rows, int32_t* out, int num_rows, int vocab,
                        cudaStream_t stream);

}  // namespace tern::kernels
