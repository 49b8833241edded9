#pragma once
// What the kernel tests that run on the GPU share: whether one is present (they skip without), and host vectors
// copied to device memory.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

namespace tern::kernels::testing {

inline bool has_gpu() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

// A device copy of v (one element's room when empty); the caller frees it.
template <typename T>
T* to_device(const std::vector<T>& v) {
  T* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, std::max<size_t>(1, v.size()) * sizeof(T)), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  return p;
}

}  // namespace tern::kernels::testing
