#include <cuda_bf16.h>

#include <stdexcept>

#include "common/dependent_launch.cuh"
#include "common/device_math.cuh"
#include "moe/add_rows.h"

namespace tern::kernels {

namespace {

constexpr int kThreads = 256;

template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// One block per target row, a thread per column: each column's sources are added in their order, so the sum does
// not depend on how the work is spread (no atomics).
template <typename Out, typename In>
__global__ void add_rows_kernel(Out* out, const In* x, int64_t width, RowsByTarget rows) {
  wait_for_prior_grids();
  allow_dependent_grids();
  const int g = blockIdx.x;
  Out* target = out + static_cast<int64_t>(rows.target_rows[g]) * width;
  const int begin = rows.source_begin[g];
  const int end = rows.source_begin[g + 1];
  for (int64_t c = threadIdx.x; c < width; c += blockDim.x) {
    float sum = to_float(target[c]);
    for (int j = begin; j < end; ++j) {
      sum = __fadd_rn(sum, to_float(x[static_cast<int64_t>(rows.sources[j]) * width + c]));
    }
    target[c] = from_float<Out>(sum);
  }
}

}  // namespace

template <typename Out, typename In>
void launch_add_rows(Out* out, const In* x, int64_t width, const RowsByTarget& rows, cudaStream_t stream) {
  if (width < 0 || rows.num_targets < 0) throw std::invalid_argument("add_rows: negative width or target count");
  if (width == 0 || rows.num_targets == 0) return;
  launch_dependent("add_rows", add_rows_kernel<Out, In>, rows.num_targets, kThreads, 0, stream, out, x, width, rows);
}

template void launch_add_rows<float, float>(float*, const float*, int64_t, const RowsByTarget&, cudaStream_t);
template void launch_add_rows<float, __nv_bfloat16>(float*, const __nv_bfloat16*, int64_t, const RowsByTarget&,
                                                    cudaStream_t);
template void launch_add_rows<__nv_bfloat16, float>(__nv_bfloat16*, const float*, int64_t, const RowsByTarget&,
                                                    cudaStream_t);
template void launch_add_rows<__nv_bfloat16, __nv_bfloat16>(__nv_bfloat16*, const __nv_bfloat16*, int64_t,
                                                            const RowsByTarget&, cudaStream_t);

}  // namespace tern::kernels
