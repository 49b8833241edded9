#include "backend/cpu/host_tensor.h"

#include <algorithm>
#include <cstdlib>

#include "backend/cpu/matmul.h"
#include "core/error.h"

namespace tern::cpu {

Tensor host_tensor(DType dtype, std::vector<int64_t> shape) {
  Tensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  const size_t bytes = std::max<size_t>(t.bytes(), 1);
  // 64-byte alignment keeps vector loads within one cache line.
  void* data = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  if (!data) fail("cpu backend: out of memory allocating {} bytes", bytes);
  t.storage = std::shared_ptr<void>(data, std::free);
  t.data = data;
  return t;
}

void matmul_rows(const float* x, int64_t num_rows, int64_t k, const Tensor& weight, int64_t first_row, int64_t n,
                 const float* bias, float* y) {
  if (weight.dtype == DType::BF16) {
    matmul_bf16(x, num_rows, k, weight.ptr<uint16_t>() + first_row * k, n, bias, y);
  } else if (weight.dtype == DType::F32) {
    matmul_f32(x, num_rows, k, weight.ptr<float>() + first_row * k, n, bias, y);
  } else {
    fail("linear: unsupported weight dtype {}", dtype_name(weight.dtype));
  }
}

}  // namespace tern::cpu
