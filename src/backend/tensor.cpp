#include "backend/tensor.h"

#include "core/error.h"

namespace tern {

Tensor Tensor::reshape(std::vector<int64_t> new_shape) const {
  Tensor out = *this;
  out.shape = std::move(new_shape);
  if (out.numel() != numel()) fail("reshape: {} elements cannot take a shape of {}", numel(), out.numel());
  return out;
}

Tensor Tensor::rows(int64_t begin, int64_t count) const {
  if (shape.empty() || begin < 0 || count < 0 || begin + count > shape[0]) {
    fail("rows: range [{}, {}) outside dimension 0 of size {}", begin, begin + count, shape.empty() ? 0 : shape[0]);
  }
  Tensor out = *this;
  out.shape[0] = count;
  out.data = static_cast<char*>(data) + static_cast<size_t>(begin * row_numel()) * dtype_size(dtype);
  return out;
}

}  // namespace tern
