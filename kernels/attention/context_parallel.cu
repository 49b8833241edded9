#include <stdexcept>
#include <string>

#include "attention/context_parallel.h"

namespace tern::kernels {

namespace {

constexpr int kThreads = 128;
// Ranks of a group (its GPUs on one host).
constexpr int kMaxRanks = 64;

__global__ void __launch_bounds__(kThreads) context_shard_positions_kernel(const int32_t* positions,
                                                                           int32_t* local_positions, int num_tokens,
                                                                           int rank, int size) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= num_tokens) return;
  const int position = positions[t];
  local_positions[t] = position >= rank ? (position - rank) / size : -1;
}

// One block per (token, head) row; threads over the value dims.
__global__ void __launch_bounds__(kThreads) merge_attention_partials_kernel(const MergeAttentionPartialsParams p) {
  __shared__ float weights[kMaxRanks];
  const int64_t row = blockIdx.x;
  const float* lse = p.lses + row * p.num_ranks;
  if (threadIdx.x == 0) {
    float max_lse = -INFINITY;
    for (int r = 0; r < p.num_ranks; ++r) max_lse = fmaxf(max_lse, lse[r]);
    float total = 0.0f;
    for (int r = 0; r < p.num_ranks; ++r) {
      weights[r] = lse[r] == -INFINITY ? 0.0f : expf(lse[r] - max_lse);
      total += weights[r];
    }
    const float inv = total > 0.0f ? 1.0f / total : 0.0f;
    for (int r = 0; r < p.num_ranks; ++r) weights[r] *= inv;
  }
  __syncthreads();
  const float* outs = p.outs + row * p.num_ranks * p.value_dim;
  for (int d = threadIdx.x; d < p.value_dim; d += blockDim.x) {
    float sum = 0.0f;
    for (int r = 0; r < p.num_ranks; ++r) {
      if (weights[r] != 0.0f) sum += weights[r] * outs[r * p.value_dim + d];
    }
    p.out[row * p.value_dim + d] = __float2bfloat16(sum);
  }
}

}  // namespace

void launch_context_shard_positions(const int32_t* positions, int32_t* local_positions, int num_tokens, int rank,
                                    int size, cudaStream_t stream) {
  if (size < 1 || rank < 0 || rank >= size) {
    throw std::invalid_argument("context shard positions: rank " + std::to_string(rank) + " of " +
                                std::to_string(size));
  }
  if (num_tokens == 0) return;
  context_shard_positions_kernel<<<(num_tokens + kThreads - 1) / kThreads, kThreads, 0, stream>>>(
      positions, local_positions, num_tokens, rank, size);
}

void launch_merge_attention_partials(const MergeAttentionPartialsParams& params, cudaStream_t stream) {
  if (params.num_ranks < 1 || params.num_ranks > kMaxRanks) {
    throw std::invalid_argument("merge of attention partials: " + std::to_string(params.num_ranks) +
                                " ranks (1 to " + std::to_string(kMaxRanks) + ")");
  }
  if (params.num_rows == 0 || params.value_dim == 0) return;
  merge_attention_partials_kernel<<<params.num_rows, kThreads, 0, stream>>>(params);
}

}  // namespace tern::kernels
