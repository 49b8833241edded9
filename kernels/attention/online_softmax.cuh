#pragma once
// The online-softmax step of the mma.m16n8k16 attention kernels (decode_attention_mma_kernel.cuh,
// mla_attention_kernel.cuh), for one of the two rows a thread holds of a 16 x 16 score tile.
#include <cmath>

#include "common/device_math.cuh"

namespace tern::kernels {

// scores[n][2h] and scores[n][2h + 1] (n = 0, 1) are row h's scores, log2 domain, -inf where masked; new_max is the
// row's maximum over them and every earlier key. Exponentiates the scores in place against new_max, folds them into
// row_sum, moves row_max to new_max and returns the factor that rescales what was accumulated under the old
// maximum. A row without a key yet (maximum -inf) stays at zero.
__device__ __forceinline__ float online_softmax_row(float (&scores)[2][4], int h, float new_max, float& row_max,
                                                    float& row_sum) {
  const float safe = new_max == -INFINITY ? 0.0f : new_max;
  const float correction = fast_exp2(row_max - safe);
  row_max = new_max;
  float sum = 0.0f;
#pragma unroll
  for (int n = 0; n < 2; ++n) {
    scores[n][2 * h] = fast_exp2(scores[n][2 * h] - safe);
    scores[n][2 * h + 1] = fast_exp2(scores[n][2 * h + 1] - safe);
    sum += scores[n][2 * h] + scores[n][2 * h + 1];
  }
  row_sum = row_sum * correction + sum;
  return correction;
}

}  // namespace tern::kernels
