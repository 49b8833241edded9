#include <algorithm>
#include <cstdint>
#include <stdexcept>

#include "common/dependent_launch.cuh"
#include "elementwise/host_copy.h"

namespace tern::kernels {

namespace {

constexpr int kThreads = 256;
constexpr int kMaxBlocks = 64;  // enough PCIe reads in flight for the largest metadata (block tables)

// Word `index` of the copy with its deferred ids resolved (16-byte words: four int32 values).
template <typename Word>
__device__ __forceinline__ Word resolve(Word word, size_t index, const DeferredIds& deferred) {
  if constexpr (sizeof(Word) == 16) {
    int32_t* values = reinterpret_cast<int32_t*>(&word);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const size_t at = 4 * index + j;
      if (at >= deferred.begin && at < deferred.begin + deferred.count && values[j] < 0) {
        values[j] = deferred.previous_ids[-1 - values[j]];
      }
    }
  }
  return word;
}

// Words of 16 bytes, then the last `tail` (< 16) bytes one a thread; or, where the pointers are not 16-byte aligned,
// `words` single bytes.
template <typename Word>
__global__ void host_copy_kernel(Word* dst, const Word* src, size_t words, int tail, bool source_ready,
                                 const DeferredIds deferred) {
  const size_t first = blockIdx.x * size_t{kThreads} + threadIdx.x;
  const size_t stride = size_t{gridDim.x} * kThreads;
  const bool copies_tail = first < static_cast<size_t>(tail);
  const unsigned char* tail_src = reinterpret_cast<const unsigned char*>(src + words) + first;
  Word word{};
  unsigned char tail_byte = 0;
  if (source_ready && first < words) word = src[first];
  if (source_ready && copies_tail) tail_byte = *tail_src;
  wait_for_prior_grids();
  allow_dependent_grids();
  if (copies_tail) reinterpret_cast<unsigned char*>(dst + words)[first] = source_ready ? tail_byte : *tail_src;
  if (first >= words) return;
  const bool resolving = deferred.previous_ids != nullptr;
  if (!source_ready) word = src[first];
  dst[first] = resolving ? resolve(word, first, deferred) : word;
  for (size_t i = first + stride; i < words; i += stride) dst[i] = resolving ? resolve(src[i], i, deferred) : src[i];
}

template <typename Word>
void launch_words(void* dst, const void* src, size_t bytes, bool source_ready, cudaStream_t stream,
                  const DeferredIds& deferred) {
  const size_t words = bytes / sizeof(Word);
  const int tail = static_cast<int>(bytes % sizeof(Word));
  const size_t blocks = std::max<size_t>((words + kThreads - 1) / kThreads, 1);
  launch_dependent("host copy", host_copy_kernel<Word>, static_cast<unsigned>(std::min<size_t>(blocks, kMaxBlocks)),
                   kThreads, 0, stream, static_cast<Word*>(dst), static_cast<const Word*>(src), words, tail,
                   source_ready, deferred);
}

}  // namespace

void launch_host_copy(void* dst, const void* src, size_t bytes, bool source_ready, cudaStream_t stream,
                      const DeferredIds& deferred) {
  if (bytes == 0) return;
  if (deferred.previous_ids && (deferred.begin + deferred.count) * sizeof(int32_t) > bytes / 16 * 16) {
    throw std::invalid_argument("host copy: deferred ids past the copy's whole 16-byte words");
  }
  if ((reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src)) % 16 == 0) {
    launch_words<uint4>(dst, src, bytes, source_ready, stream, deferred);
  } else if (deferred.previous_ids) {
    throw std::invalid_argument("host copy: resolving deferred ids needs 16-byte aligned pointers");
  } else {
    launch_words<unsigned char>(dst, src, bytes, source_ready, stream, deferred);
  }
}

}  // namespace tern::kernels
