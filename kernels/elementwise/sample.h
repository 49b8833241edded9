#pragma once
// Random sampling on the device with temperature, top-k and top-p, so that only token ids travel back to the
// host. The kept set is every token whose logit is at least a threshold: the k-th largest logit (ties kept),
// then, within that set, the smallest threshold whose softmax mass reaches top_p. Thresholds are found exactly by
// bisection over the 16-bit order of bf16 values. A row draws the token where its `uniform` falls in the kept
// tokens' cumulative softmax(logits / temperature), in vocabulary order. A row with a draft to verify
// (speculative decoding, Leviathan et al. 2023 with a point-mass draft) keeps it with its probability p(draft)
// under that distribution, else draws from the distribution without it, renormalized: the row's token then follows
// the distribution exactly, and differs from the draft exactly when the draft was rejected.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace tern::kernels {

struct RowSampling {
  float temperature = 1.0f;  // <= 0: greedy (the first largest logit)
  int32_t top_k = 0;         // <= 0 or >= vocab: all
  float top_p = 1.0f;        // >= 1: all
  float uniform = 0.0f;      // in [0, 1): the row's random draw
  int32_t draft_id = -1;     // a draft to verify, or -1; greedy rows ignore it
  float draft_uniform = 0.0f;  // in [0, 1): the draft's acceptance draw
};

// logits [num_rows, vocab] bf16, rows [num_rows] (device), out [num_rows] int32.
void launch_sample_bf16(const __nv_bfloat16* logits, const RowSampling* rows, int32_t* out, int num_rows, int vocab,
                        cudaStream_t stream);

}  // namespace tern::kernels
