#include <cfloat>
#include <stdexcept>

#include "elementwise/argmax.h"

namespace tern::kernels {

namespace {

constexpr int kThreads = 512;

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

__device__ __forceinline__ void keep_better(float& best, int& index, float value, int candidate) {
  if (value > best || (value == best && candidate < index)) {
    best = value;
    index = candidate;
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads) argmax_kernel(const T* logits, int32_t* out, int vocab) {
  const T* row = logits + static_cast<int64_t>(blockIdx.x) * vocab;
  float best = -FLT_MAX;
  int index = vocab;
  for (int i = threadIdx.x; i < vocab; i += kThreads) keep_better(best, index, to_float(row[i]), i);
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    keep_better(best, index, __shfl_xor_sync(0xffffffffu, best, offset), __shfl_xor_sync(0xffffffffu, index, offset));
  }
  __shared__ float warp_best[kThreads / 32];
  __shared__ int warp_index[kThreads / 32];
  if (threadIdx.x % 32 == 0) {
    warp_best[threadIdx.x / 32] = best;
    warp_index[threadIdx.x / 32] = index;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    best = warp_best[0];
    index = warp_index[0];
    for (int w = 1; w < kThreads / 32; ++w) keep_better(best, index, warp_best[w], warp_index[w]);
    out[blockIdx.x] = index < vocab ? index : 0;  // a row of NaNs has no largest element; report token 0
  }
}

void check(int num_rows, int vocab) {
  if (num_rows < 0 || vocab <= 0) throw std::invalid_argument("argmax: rows need at least one logit");
}

}  // namespace

void launch_argmax_bf16(const __nv_bfloat16* logits, int32_t* out, int num_rows, int vocab, cudaStream_t stream) {
  check(num_rows, vocab);
  if (num_rows > 0) argmax_kernel<<<num_rows, kThreads, 0, stream>>>(logits, out, vocab);
}

void launch_argmax_f32(const float* logits, int32_t* out, int num_rows, int vocab, cudaStream_t stream) {
  check(num_rows, vocab);
  if (num_rows > 0) argmax_kernel<<<num_rows, kThreads, 0, stream>>>(logits, out, vocab);
}

}  // namespace tern::kernels
