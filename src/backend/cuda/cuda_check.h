#pragma once
// CUDA and cuBLAS status codes turned into tern::Error, naming the call that failed.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <exception>

#include "core/error.h"

namespace tern::cuda {

inline void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) fail("cuda backend: {}: {}", what, cudaGetErrorString(status));
}

inline void check(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS) fail("cuda backend: {}: cuBLAS status {}", what, static_cast<int>(status));
}

// Runs a kernel launcher: its argument checks (std::exception) and the launch status become tern::Error.
template <typename Launch>
void launch(const char* op, Launch&& launch_fn) {
  try {
    launch_fn();
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    fail("cuda backend: {}: {}", op, e.what());
  }
  check(cudaGetLastError(), op);
}

}  // namespace tern::cuda
