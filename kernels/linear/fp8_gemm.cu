#include <stdexcept>
#include <string>

#include "linear/fp8_gemm.h"
#include "linear/wgmma_gemm_kernel.cuh"

namespace tern::kernels {

int64_t fp8_gemm_workspace_floats(int m, int n, int k) {
  if (m <= 0 || n <= 0 || k <= 0) return 0;
  const wgmma_gemm::Schedule s = wgmma_gemm::make_schedule(m, n, k, wgmma_gemm::device_sms(), true,
                                                           wgmma_gemm::kWideTiles<Fp8GemmParams>);
  return s.splits > 1 ? static_cast<int64_t>(s.splits) * m * n : 0;
}

void launch_fp8_gemm(const Fp8GemmParams& p, cudaStream_t stream) {
  if (p.m < 0 || p.n < 0 || p.k <= 0 || p.k % 16 != 0 || !p.weight.covers(p.k) || !p.x || !p.x_scales ||
      (!p.group_rows && p.x_scale_stride < p.m) || p.routed_rows < 0) {
    throw std::invalid_argument("fp8_gemm: [" + std::to_string(p.m) + ", " + std::to_string(p.k) + "] x [" +
                                std::to_string(p.n) + ", " + std::to_string(p.k) +
                                "]^T (k a positive multiple of 16, with every scale)");
  }
  // An e4m3 code is a byte: a row's bytes are its k.
  wgmma_gemm::launch_gemm("fp8_gemm", p, p.x, p.weight.codes, p.k, p.split_workspace, stream);
}

}  // namespace tern::kernels
