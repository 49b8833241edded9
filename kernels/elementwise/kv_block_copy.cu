#include <algorithm>
#include <stdexcept>
#include <string>

#include "elementwise/kv_block_copy.h"

namespace tern::kernels {

namespace {

constexpr int kThreads = 256;
// Block pairs travel in the kernel's parameters (within the 4 KB every architecture takes), so a launch needs no
// upload of its own; more pairs take more launches.
constexpr int kPairsPerLaunch = 448;

struct BlockPairs {
  int32_t src[kPairsPerLaunch];
  int32_t dst[kPairsPerLaunch];
};

template <typename Word>
__device__ __forceinline__ void copy_words(const unsigned char* src, unsigned char* dst, size_t bytes) {
  const Word* from = reinterpret_cast<const Word*>(src);
  Word* to = reinterpret_cast<Word*>(dst);
  const size_t words = bytes / sizeof(Word);
  for (size_t i = threadIdx.x; i < words; i += kThreads) to[i] = from[i];
}

// blockIdx.x: the pair; blockIdx.y: the tensor.
__global__ void kv_block_copy_kernel(const KvLayerCopy layer, const BlockPairs pairs) {
  const int tensor = blockIdx.y;
  const size_t bytes = layer.block_bytes[tensor];
  if (bytes == 0) return;
  const auto* src = static_cast<const unsigned char*>(layer.src[tensor]) + bytes * pairs.src[blockIdx.x];
  auto* dst = static_cast<unsigned char*>(layer.dst[tensor]) + bytes * pairs.dst[blockIdx.x];
  const bool aligned16 = (reinterpret_cast<uintptr_t>(src) | reinterpret_cast<uintptr_t>(dst) | bytes) % 16 == 0;
  const bool aligned4 = (reinterpret_cast<uintptr_t>(src) | reinterpret_cast<uintptr_t>(dst) | bytes) % 4 == 0;
  if (aligned16) {
    copy_words<uint4>(src, dst, bytes);
  } else if (aligned4) {
    copy_words<uint32_t>(src, dst, bytes);
  } else {
    copy_words<unsigned char>(src, dst, bytes);
  }
}

}  // namespace

void launch_kv_block_copy(const KvLayerCopy& layer, const int32_t* src_blocks, const int32_t* dst_blocks,
                          int num_blocks, cudaStream_t stream) {
  for (int first = 0; first < num_blocks; first += kPairsPerLaunch) {
    const int count = std::min(kPairsPerLaunch, num_blocks - first);
    BlockPairs pairs;
    std::copy(src_blocks + first, src_blocks + first + count, pairs.src);
    std::copy(dst_blocks + first, dst_blocks + first + count, pairs.dst);
    kv_block_copy_kernel<<<dim3(static_cast<unsigned>(count), KvLayerCopy::kTensors), kThreads, 0, stream>>>(layer,
                                                                                                            pairs);
    const cudaError_t status = cudaGetLastError();
    if (status != cudaSuccess) throw std::runtime_error(std::string("kv block copy: ") + cudaGetErrorString(status));
  }
}

}  // namespace tern::kernels
