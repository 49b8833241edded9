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
  // Set on a block-quantized weight that a backend keeps as codes, [rows, columns] or experts' [E, N, K] (rows
  // E * N):
  // - block FP8 (dtype F8_E4M3): the float32 scales of its 128x128 blocks, [ceil(rows / 128), stride]
  //   (backend/block_fp8_layout.h; experts then of N a multiple of 128); element (r, c) is its code times
  //   scales[r / 128][c / 128]. Experts' weights on grids of their own (Backend::load_expert_weight) have scales
  //   [E, ceil(N / 128), stride] instead: element (e, r, c) is its code times scales[e][r / 128][c / 128];
  // - MXFP4 (dtype F4_E2M1, two codes a byte): the e8m0 scale bytes of its 1x32 groups, [rows, columns / 32]
  //   (backend/mxfp4_layout.h); element (r, c) is its code times 2^(scales[r][c / 32] - 127).
  std::shared_ptr<const Tensor> block_scales;

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  int64_t size(int dim) const { return shape.at(dim < 0 ? shape.size() + dim : dim); }
  size_t bytes() const { return dtype_bytes(dtype, numel()); }
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
  // The same elements seen with another shape of equal element count (a block-quantized weight keeps its columns,
  // and a block-FP8 one whole 128-row blocks).
  Tensor reshape(std::vector<int64_t> new_shape) const;
  // Rows [begin, begin + count) of dimension 0 (of a block-quantized weight: with their scales, and for block FP8
  // from a block's first row).
  Tensor rows(int64_t begin, int64_t count) const;
  // The rows a block-quantized weight's scales are given per: 128 for block FP8, 1 for MXFP4.
  int64_t scale_block_rows() const;
  // Whether this is experts' block-FP8 weight with a grid of scales per expert (3-D block_scales).
  bool experts_own_grids() const;
};

}  // namespace tern
