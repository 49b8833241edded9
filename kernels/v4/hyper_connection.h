#pragma once
// DeepSeek-V4's manifold-constrained hyper-connections (mHC): the per-token stream weights and the collapse of
// num_streams residual streams into a block's input and the expansion of its output back into them.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace tern::kernels {

struct HyperMixParams {
  const float* mixes = nullptr;  // [num_tokens, width]
  const float* base = nullptr;   // [width]
  const float* scale = nullptr;  // [1] (width = num_streams) or [3] (width = (2 + num_streams) * num_streams)
  float* out = nullptr;          // [num_tokens, width]
  int num_tokens = 0;
  int num_streams = 0;
  int width = 0;
  int sinkhorn_iters = 0;
  float eps = 0.0f;
};

// One thread per token (v4::hyper_mix_row); 16 lanes per token for the full weights of 4 streams (V4's).
void launch_hyper_mix(const HyperMixParams& params, cudaStream_t stream);

// out [T, hidden] = sum_i mix[t, i] * streams[t, i] over the streams, mix [T, mix_width >= num_streams].
void launch_hyper_collapse(const __nv_bfloat16* streams, const float* mix, __nv_bfloat16* out, int num_tokens,
                           int num_streams, int hidden, int mix_width, cudaStream_t stream);

// launch_hyper_mix, then launch_hyper_collapse of streams [T, N, hidden] by its weights into out [T, hidden], in one
// launch.
void launch_hyper_mix_collapse(const HyperMixParams& params, const __nv_bfloat16* streams, __nv_bfloat16* out,
                               int hidden, cudaStream_t stream);

// out [T, N, hidden]: stream k = post[k] * block_out + sum_j comb[j][k] * streams[j], with post = mix[t, N:2N] and
// comb = mix[t, 2N:] (row j: input stream j), mix [T, (2 + N) * N].
void launch_hyper_expand(const __nv_bfloat16* streams, const __nv_bfloat16* block_out, const float* mix,
                         __nv_bfloat16* out, int num_tokens, int num_streams, int hidden, cudaStream_t stream);

}  // namespace tern::kernels
