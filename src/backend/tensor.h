#pragma once
// A dense, row-major tensor in one backend's memory (host memory for the CPU backend, device memory for CUDA).
// Tensors are cheap handles: copies share the storage.
#include <cstdint>
#include <memory>
#include <vector>

#include "core/dtype.h"

namespace tern {

struct Tensor {
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  void* data = nullptr;
  std::shared_ptr<void> storage;  // keeps `data` alive

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  int64_t size(int dim) const { return shape.at(dim < 0 ? shape.size() + dim : dim); }
  size_t bytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype); }
  // Elements per row of dimension 0 (also of a tensor with no rows).
  int64_t row_numel() const {
    int64_t n = 1;
    for (size_t d = 1; d < shape.size(); ++d) n *= shape[d];
    return n;
  }

  template <typename T>
  T* ptr() const {
    return static_cast<T*>(data);
  }
  // The same elements seen with another shape of equal element count.
  Tensor reshape(std::vector<int64_t> new_shape) const;
  // Rows [begin, begin + count) of dimension 0.
  Tensor rows(int64_t begin, int64_t count) const;
};

}  // namespace tern
