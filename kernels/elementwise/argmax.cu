#include <cfloat>
#include <stdexcept>

#include "common/dependent_launch.cuh"
#include "common/device_math.cuh"
#include "elementwise/argmax.h"

namespace tern::kernels {

namespace {

constexpr int kThreads = 1024;

__device__ __forceinline__ void keep_better(float& best, int& index, float value, int candidate) {
  if (value > best || (value == best && candidate < index)) {
    best = value;
    index = candidate;
  }
}

__device__ __forceinline__ void keep_best_of_chunk(float& best, int& index, const float* row, int i) {
  const float4 v = *reinterpret_cast<const float4*>(row + i);
  keep_better(best, index, v.x, i);
  keep_better(best, index, v.y, i + 1);
  keep_better(best, index, v.z, i + 2);
  keep_better(best, index, v.w, i + 3);
}
__device__ __forceinline__ void keep_best_of_chunk(float& best, int& index, const __nv_bfloat16* row, int i) {
  float v[8];
  load_f32x8(row + i, v);
#pragma unroll
  for (int j = 0; j < 8; ++j) keep_better(best, index, v[j], i + j);
}

// This thread's best of row[begin, end) in a block of Threads: 16 bytes an access where the row allows (begin a
// multiple of 16 bytes' worth), several accesses in flight per thread.
template <int Threads, typename T>
__device__ __forceinline__ void keep_best_of_range(float& best, int& index, const T* row, int begin, int end) {
  constexpr int kChunk = 16 / sizeof(T);
  const bool aligned = reinterpret_cast<uintptr_t>(row) % 16 == 0;
  const int vector_end = aligned ? begin + (end - begin) / kChunk * kChunk : begin;
#pragma unroll 4
  for (int i = begin + threadIdx.x * kChunk; i < vector_end; i += Threads * kChunk) {
    keep_best_of_chunk(best, index, row, i);
  }
  for (int i = vector_end + threadIdx.x; i < end; i += Threads) keep_better(best, index, to_float(row[i]), i);
}

// The best (value, index) of a block's threads, on thread 0.
template <int Threads>
__device__ __forceinline__ void block_best(float& best, int& index) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    keep_better(best, index, __shfl_xor_sync(0xffffffffu, best, offset), __shfl_xor_sync(0xffffffffu, index, offset));
  }
  __shared__ float warp_best[Threads / 32];
  __shared__ int warp_index[Threads / 32];
  if (threadIdx.x % 32 == 0) {
    warp_best[threadIdx.x / 32] = best;
    warp_index[threadIdx.x / 32] = index;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < Threads / 32; ++w) keep_better(best, index, warp_best[w], warp_index[w]);
  }
}

// One block per row (a decode step's 128K-entry row is one block's work, so the loads must be wide and many: 1,024
// threads and the loop unrolled took batch-1 argmax on the 8B model's vocabulary from 12.2 to 7.9 us).
template <typename T>
__global__ void __launch_bounds__(kThreads) argmax_kernel(const T* logits, int32_t* out, int vocab) {
  wait_for_prior_grids();
  allow_dependent_grids();
  const T* row = logits + static_cast<int64_t>(blockIdx.x) * vocab;
  float best = -FLT_MAX;
  int index = vocab;
  keep_best_of_range<kThreads>(best, index, row, 0, vocab);
  block_best<kThreads>(best, index);
  if (threadIdx.x == 0) out[blockIdx.x] = index < vocab ? index : 0;  // a row of NaNs has no largest element: token 0
}

// One block reads a row at about one SM's share of the bandwidth (7.6 us for the 8B model's 128K logits, the last
// kernel of a batch-1 decode step): at few rows, blocks of kSplitThreads take kSplitKeys logits each (grid: splits
// x rows).
constexpr int kSplitThreads = 256;
constexpr int kSplitKeys = kSplitThreads * 32;

template <typename T>
__global__ void __launch_bounds__(kSplitThreads) argmax_split_kernel(const T* logits, int32_t* out, int vocab,
                                                                     ArgmaxWorkspace workspace) {
  wait_for_prior_grids();
  allow_dependent_grids();
  const int row_index = blockIdx.y;
  const int splits = gridDim.x;
  const T* row = logits + static_cast<int64_t>(row_index) * vocab;
  const int begin = blockIdx.x * kSplitKeys;
  float best = -FLT_MAX;
  int index = vocab;
  keep_best_of_range<kSplitThreads>(best, index, row, begin, min(vocab, begin + kSplitKeys));
  block_best<kSplitThreads>(best, index);

  auto* slot_best = static_cast<float*>(workspace.data);
  auto* slot_index = reinterpret_cast<int32_t*>(slot_best + kArgmaxSplitRows * kArgmaxMaxSplits);
  auto* tickets = reinterpret_cast<unsigned*>(slot_index + kArgmaxSplitRows * kArgmaxMaxSplits);
  const int slot = row_index * kArgmaxMaxSplits + blockIdx.x;
  __shared__ bool last;
  if (threadIdx.x == 0) {
    slot_best[slot] = best;
    slot_index[slot] = index;
    __threadfence();  // the slot before the ticket (the CUDA samples' threadFenceReduction)
    last = atomicAdd(&tickets[row_index], 1u) == static_cast<unsigned>(splits - 1);
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  best = -FLT_MAX;
  index = vocab;
  for (int s = threadIdx.x; s < splits; s += kSplitThreads) {
    keep_better(best, index, __ldcg(&slot_best[row_index * kArgmaxMaxSplits + s]),
                __ldcg(&slot_index[row_index * kArgmaxMaxSplits + s]));
  }
  block_best<kSplitThreads>(best, index);
  if (threadIdx.x == 0) {
    out[row_index] = index < vocab ? index : 0;
    tickets[row_index] = 0;
  }
}

void check(int num_rows, int vocab) {
  if (num_rows < 0 || vocab <= 0) throw std::invalid_argument("argmax: rows need at least one logit");
}

template <typename T>
void launch_argmax(const T* logits, int32_t* out, int num_rows, int vocab, const ArgmaxWorkspace& workspace,
                   cudaStream_t stream) {
  check(num_rows, vocab);
  if (num_rows == 0) return;
  const int splits = (vocab + kSplitKeys - 1) / kSplitKeys;
  if (splits > 1 && splits <= kArgmaxMaxSplits && num_rows <= kArgmaxSplitRows && workspace.data) {
    launch_dependent("argmax", argmax_split_kernel<T>, dim3(splits, num_rows), kSplitThreads, 0, stream, logits, out,
                     vocab, workspace);
  } else {
    launch_dependent("argmax", argmax_kernel<T>, num_rows, kThreads, 0, stream, logits, out, vocab);
  }
}

}  // namespace

void launch_argmax_bf16(const __nv_bfloat16* logits, int32_t* out, int num_rows, int vocab,
                        const ArgmaxWorkspace& workspace, cudaStream_t stream) {
  launch_argmax(logits, out, num_rows, vocab, workspace, stream);
}

void launch_argmax_f32(const float* logits, int32_t* out, int num_rows, int vocab, const ArgmaxWorkspace& workspace,
                       cudaStream_t stream) {
  launch_argmax(logits, out, num_rows, vocab, workspace, stream);
}

}  // namespace tern::kernels
