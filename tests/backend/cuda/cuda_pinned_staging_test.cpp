// Uploads through the pinned ring (src/backend/cuda/device_allocator.h), copied by the host-copy kernel: every
// length from 1 to 70 bytes to destinations 16-byte aligned or not (16-byte words and a byte tail, or bytes), and
// nothing written past them; a ring small enough to wrap.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/device_allocator.h"

namespace tern {
namespace {

TEST(CudaPinnedStagingTest, UploadsEveryLengthToAlignedAndUnalignedDestinations) {
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  constexpr size_t kBuffer = 256;
  constexpr uint8_t kUntouched = 0xAB;
  cuda::PinnedStaging staging(1024);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  uint8_t* device = nullptr;
  ASSERT_EQ(cudaMalloc(&device, kBuffer), cudaSuccess);
  for (size_t offset : {0, 1, 16}) {
    for (size_t bytes = 1; bytes <= 70; ++bytes) {
      std::vector<uint8_t> source(bytes);
      for (size_t i = 0; i < bytes; ++i) source[i] = static_cast<uint8_t>(offset * 31 + bytes * 7 + i);
      ASSERT_EQ(cudaMemsetAsync(device, kUntouched, kBuffer, stream), cudaSuccess);
      staging.upload(device + offset, source.data(), bytes, stream);
      std::vector<uint8_t> back(kBuffer);
      ASSERT_EQ(cudaMemcpyAsync(back.data(), device, kBuffer, cudaMemcpyDeviceToHost, stream), cudaSuccess);
      ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
      for (size_t i = 0; i < kBuffer; ++i) {
        const bool copied = i >= offset && i < offset + bytes;
        ASSERT_EQ(back[i], copied ? source[i - offset] : kUntouched)
            << bytes << " bytes at offset " << offset << ", byte " << i;
      }
    }
  }
  cudaFree(device);
  cudaStreamDestroy(stream);
}

}  // namespace
}  // namespace tern
