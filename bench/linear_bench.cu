// The GEMMs of a Llama-3.1-8B-shaped decode step through cuBLASLt (src/backend/cuda/gemm.*) and, where it
// applies, tern's gemv kernel (kernels/linear), at decode batch sizes: how much of the copy bandwidth each weight
// read reaches. Random bf16 data, medians of CUDA-event-timed runs after warm-up, a device-to-device copy of the
// largest weight measured in the same run; every call reads a weight copy that is not in L2.
// Usage: linear_bench
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <utility>
#include <vector>

#include "backend/cuda/gemm.h"
#include "cuda_bench.cuh"
#include "linear/gemv.h"

using tern::bench::check;
using tern::bench::fill_random;
using tern::bench::median_ms;

static tern::kernels::GemvParams gemv_params(const __nv_bfloat16* x, const __nv_bfloat16* weight, __nv_bfloat16* out,
                                             int64_t n, int64_t k) {
  tern::kernels::GemvParams p;
  p.x = x;
  p.weight = weight;
  p.out = out;
  p.n = static_cast<int>(n);
  p.k = static_cast<int>(k);
  return p;
}

int main() {
  struct Shape {
    const char* name;
    int64_t n, k;
  };
  const Shape shapes[] = {{"qkv", 6144, 4096}, {"o_proj", 4096, 4096}, {"gate_up", 28672, 4096},
                          {"down", 4096, 14336}, {"lm_head", 128256, 4096}};
  cudaStream_t stream;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
  const size_t max_weight = size_t{128256} * 4096;
  const size_t max_act = size_t{64} * 28672;
  __nv_bfloat16 *weight, *copy, *x, *out;
  void* workspace;
  check(cudaMalloc(&weight, max_weight * 2), "malloc");
  check(cudaMalloc(&copy, max_weight * 2), "malloc");
  check(cudaMalloc(&x, max_act * 2), "malloc");
  check(cudaMalloc(&out, max_act * 2 * 8), "malloc");
  check(cudaMalloc(&workspace, size_t{32} << 20), "malloc");
  fill_random<<<4096, 256, 0, stream>>>(weight, max_weight, 1);
  fill_random<<<1024, 256, 0, stream>>>(x, max_act, 2);
  tern::cuda::Gemm gemm(stream, workspace, size_t{32} << 20);

  const double copy_ms = median_ms(
      [&] { check(cudaMemcpyAsync(copy, weight, max_weight * 2, cudaMemcpyDeviceToDevice, stream), "copy"); }, 5, 20,
      stream);
  // A copy reads and writes every byte.
  const double copy_tbs = 2.0 * max_weight * 2 / (copy_ms * 1e-3) / 1e12;
  std::printf("copy anchor: %.3f ms for %.2f GB read + written, %.2f TB/s\n", copy_ms, max_weight * 2 / 1e9, copy_tbs);
  std::printf("%-8s %4s %12s %-9s %10s %7s %8s\n", "gemm", "m", "n x k", "kernel", "time (us)", "TB/s", "of copy");
  const int batches[] = {1, 4, 64};
  double step_us[3][2] = {};  // per batch: cuBLASLt, and the kernel tern picks (gemv where it applies)
  for (const Shape& s : shapes) {
    for (int b = 0; b < 3; ++b) {
      const int64_t m = batches[b];
      const double bytes = 2.0 * s.n * s.k + 2.0 * m * (s.k + s.n);
      const auto report = [&](const char* kernel, double ms) {
        const double tbs = bytes / (ms * 1e-3) / 1e12;
        std::printf("%-8s %4lld %6lldx%-5lld %-9s %10.1f %7.2f %7.0f%%\n", s.name, static_cast<long long>(m),
                    static_cast<long long>(s.n), static_cast<long long>(s.k), kernel, ms * 1e3, tbs,
                    100 * tbs / copy_tbs);
      };
      const int layers = s.n == 128256 ? 1 : 32;  // 32 layers, one lm_head
      // Each call reads another copy of the weight, cycling through the 1 GB buffer, so that no run finds its
      // weight in the 50 MB L2 (a decode step streams 16 GB of them).
      const size_t copies = max_weight / static_cast<size_t>(s.n * s.k);
      size_t call = 0;
      const auto next_weight = [&] { return weight + (call++ % copies) * s.n * s.k; };
      const double cublas_ms =
          median_ms([&] { gemm.run(x, next_weight(), nullptr, out, m, s.n, s.k); }, 5, 50, stream);
      report("cuBLASLt", cublas_ms);
      double picked_ms = cublas_ms;
      if (tern::kernels::gemv_supports(m, s.n, s.k)) {
        picked_ms = median_ms(
            [&] {
              tern::kernels::launch_gemv(gemv_params(x, next_weight(), out, s.n, s.k), stream);
            },
            5, 50, stream);
        report("gemv", picked_ms);
      }
      step_us[b][0] += cublas_ms * 1e3 * layers;
      step_us[b][1] += picked_ms * 1e3 * layers;
    }
  }
  for (int b = 0; b < 3; ++b) {
    std::printf("batch %d: the GEMMs of one decode step take %.2f ms with cuBLASLt, %.2f ms with gemv where it applies\n",
                batches[b], step_us[b][0] / 1e3, step_us[b][1] / 1e3);
  }
  // One batch-1 decode step's GEMVs back to back, as a recorded step runs them: 32 layers of distinct weights and
  // the lm_head (15 GB, so every weight comes from memory), each launched as a dependent of the one before.
  {
    std::vector<std::pair<__nv_bfloat16*, Shape>> chain;
    size_t total_bytes = 0;
    for (int layer = 0; layer < 32; ++layer) {
      for (const Shape& s : shapes) {
        if (s.n == 128256 && layer != 31) continue;
        __nv_bfloat16* w;
        check(cudaMalloc(&w, s.n * s.k * 2), "malloc");
        fill_random<<<4096, 256, 0, stream>>>(w, s.n * s.k, layer + 3);
        chain.push_back({w, s});
        total_bytes += s.n * s.k * 2;
      }
    }
    const double chain_ms = median_ms(
        [&] {
          for (const auto& [w, s] : chain) {
            tern::kernels::launch_gemv(gemv_params(x, w, out, s.n, s.k), stream);
          }
        },
        2, 10, stream);
    std::printf("batch 1: one decode step's %zu GEMVs back to back: %.3f ms for %.2f GB, %.2f TB/s (%.0f%% of copy)\n",
                chain.size(), chain_ms, total_bytes / 1e9, total_bytes / (chain_ms * 1e-3) / 1e12,
                100 * total_bytes / (chain_ms * 1e-3) / 1e12 / copy_tbs);
    for (const auto& link : chain) check(cudaFree(link.first), "free");
  }
  return 0;
}
