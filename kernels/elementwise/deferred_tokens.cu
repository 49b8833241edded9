#include <stdexcept>

#include "common/dependent_launch.cuh"
#include "elementwise/deferred_tokens.h"

namespace tern::kernels {

namespace {

constexpr int kThreads = 256;

__global__ void fill_deferred_tokens_kernel(int32_t* token_ids, const int32_t* token_index,
                                            const int32_t* previous_row, int count, const int32_t* previous_ids) {
  wait_for_prior_grids();
  allow_dependent_grids();
  const int i = blockIdx.x * kThreads + threadIdx.x;
  if (i < count) token_ids[token_index[i]] = previous_ids[previous_row[i]];
}

}  // namespace

void launch_fill_deferred_tokens(int32_t* token_ids, const int32_t* token_index, const int32_t* previous_row,
                                 int count, const int32_t* previous_ids, cudaStream_t stream) {
  if (count < 0) throw std::invalid_argument("fill_deferred_tokens: negative count");
  if (count == 0) return;
  const int blocks = (count + kThreads - 1) / kThreads;
  launch_dependent("fill_deferred_tokens", fill_deferred_tokens_kernel, blocks, kThreads, 0, stream, token_ids,
                   token_index, previous_row, count, previous_ids);
}

}  // namespace tern::kernels
