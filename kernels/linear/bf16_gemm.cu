#include <stdexcept>
#include <string>

#include "linear/bf16_gemm.h"
#include "linear/wgmma_gemm_kernel.cuh"

namespace tern::kernels {

void launch_bf16_gemm(const Bf16GemmParams& p, cudaStream_t stream) {
  if (p.m < 0 || p.n < 0 || p.k <= 0 || p.k % 8 != 0 || !p.x || !p.weight || !p.out || p.routed_rows < 0) {
    throw std::invalid_argument("bf16_gemm: [" + std::to_string(p.m) + ", " + std::to_string(p.k) + "] x [" +
                                std::to_string(p.n) + ", " + std::to_string(p.k) +
                                "]^T (k a positive multiple of 8, with x, weight and out)");
  }
  wgmma_gemm::launch_gemm("bf16_gemm", p, p.x, p.weight, 2 * p.k, nullptr, stream);
}

}  // namespace tern::kernels
