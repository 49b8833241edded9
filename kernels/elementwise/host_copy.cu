#include <cstdint>

#include "common/dependent_launch.cuh"
#include "elementwise/host_copy.h"

namespace tern::kernels {

namespace {

constexpr int kThreads = 256;
constexpr int kMaxBlocks = 64;  // enough PCIe reads in flight for the largest metadata (block tables)

template <typename Word>
__global__ void host_copy_kernel(Word* dst, const Word* src, size_t words, bool source_ready) {
  const size_t first = blockIdx.x * size_t{kThreads} + threadIdx.x;
  const size_t stride = size_t{gridDim.x} * kThreads;
  Word word{};
  if (source_ready && first < words) word = src[first];
  wait_for_prior_grids();
  allow_dependent_grids();
  if (first >= words) return;
  dst[first] = source_ready ? word : src[first];
  for (size_t i = first + stride; i < words; i += stride) dst[i] = src[i];
}

template <typename Word>
void launch_words(void* dst, const void* src, size_t bytes, bool source_ready, cudaStream_t stream) {
  const size_t words = bytes / sizeof(Word);
  const size_t blocks = (words + kThreads - 1) / kThreads;
  launch_dependent("host copy", host_copy_kernel<Word>, static_cast<unsigned>(blocks < kMaxBlocks ? blocks : kMaxBlocks),
                   kThreads, 0, stream, static_cast<Word*>(dst), static_cast<const Word*>(src), words, source_ready);
}

}  // namespace

void launch_host_copy(void* dst, const void* src, size_t bytes, bool source_ready, cudaStream_t stream) {
  if (bytes == 0) return;
  if ((reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src) | bytes) % 16 == 0) {
    launch_words<uint4>(dst, src, bytes, source_ready, stream);
  } else {
    launch_words<unsigned char>(dst, src, bytes, source_ready, stream);
  }
}

}  // namespace tern::kernels
