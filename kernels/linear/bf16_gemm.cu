#include <stdexcept>
#include <string>

#include "linear/bf16_gemm.h"
#include "linear/wgmma_gemm_kernel.cuh"

namespace tern::kernels {

void launch_bf16_gemm(const Bf16GemmParams& p, cudaStream_t stream) {
  const bool grouped = p.group_rows != nullptr;
  if (grouped && (p.num_groups <= 0 || p.num_groups > wgmma_gemm::kMaxGroups)) {
    throw std::invalid_argument("bf16_gemm: " + std::to_string(p.num_groups) + " groups (1 to " +
                                std::to_string(wgmma_gemm::kMaxGroups) + ")");
  }
  if (p.m < 0 || p.n < 0 || p.k <= 0 || p.k % 8 != 0 || !p.x || !p.weight || !p.out || p.routed_rows < 0) {
    throw std::invalid_argument("bf16_gemm: [" + std::to_string(p.m) + ", " + std::to_string(p.k) + "] x [" +
                                std::to_string(p.n) + ", " + std::to_string(p.k) +
                                "]^T (k a positive multiple of 8, with x, weight and out)");
  }
  if (p.m == 0 || p.n == 0) return;
  const int row_bytes = 2 * p.k;
  const wgmma_gemm::Schedule schedule =
      grouped ? wgmma_gemm::grouped_schedule(p.m, p.n, row_bytes, p.num_groups,
                                             p.routed_rows > 0 ? p.routed_rows : p.m)
              : wgmma_gemm::make_schedule(p.m, p.n, row_bytes, wgmma_gemm::device_sms(), false);
  wgmma_gemm::launch_gemm("bf16_gemm", p, p.x, p.weight, static_cast<uint64_t>(row_bytes), schedule, nullptr,
                          stream);
}

}  // namespace tern::kernels
