// Block-FP8 linears (the CUDA backend's path for FP8 checkpoints and --quantization fp8) against bf16, through the
// same calls the backend makes: the FP8 tensor-core GEMM (kernels/linear/fp8_gemm) with and without the activation
// quantization before it (kernels/linear/block_fp8), the GEMV and the few-rows GEMM on FP8 codes
// (kernels/linear/gemv, few_rows_gemm), beside cuBLASLt's bf16 GEMM (src/backend/cuda/gemm.*).
// Compute: 8192^3 and the Llama-3.1-8B prefill shapes at 4,096 rows, TFLOP/s beside cuBLASLt bf16 in the same run.
// Bandwidth: the 8B decode shapes at 1, 4, 8 and 16 rows, and one decode step's linears back to back (32 layers of
// distinct weights), as a share of a device-to-device copy measured in the same run; every call reads a weight copy
// that is not in L2. Decode calls are timed as a recorded step runs them: 20 calls back to back in a CUDA graph,
// each launched as a dependent of the one before, so the host's launch time stays out.
// Random data, medians of CUDA-event-timed runs after warm-up.
// Usage: fp8_linear_bench
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "backend/cuda/gemm.h"
#include "cuda_bench.cuh"
#include "linear/block_fp8.h"
#include "linear/few_rows_gemm.h"
#include "linear/fp8_gemm.h"
#include "linear/gemv.h"

using tern::bench::check;
using tern::bench::fill_random;
using tern::bench::graph_median_ms;
using tern::bench::median_ms;
using tern::bench::print_device_and_copy_anchor;

namespace {

// A weight's codes with float32 scales in the backend's layout: rows of ceil(k / 128) scales rounded up to 4
// (BlockFp8Layout::stride_for, backend/block_fp8_layout.h, C++20, which nvcc here does not compile).
tern::kernels::BlockFp8Codes block_fp8_codes(const __nv_fp8_e4m3* codes, const float* scales, int64_t k) {
  return {codes, scales, static_cast<int>(((k + 127) / 128 + 3) / 4 * 4)};
}

}  // namespace

int main() {
  const double copy_tbs = print_device_and_copy_anchor();
  cudaStream_t stream;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
  const size_t weight_bytes = size_t{1} << 30;  // 1 GB of FP8 codes, 2 GB of bf16 weights
  const size_t max_rows = 8192, max_k = 28672;
  __nv_fp8_e4m3 *codes, *x_codes;
  __nv_bfloat16 *weight, *x, *out;
  float *weight_scales, *x_scales;
  void* workspace;
  float* split_workspace;
  check(cudaMalloc(&codes, weight_bytes), "malloc");
  check(cudaMalloc(&weight, weight_bytes * 2), "malloc");
  check(cudaMalloc(&weight_scales, weight_bytes / 128 / 128 * 8 + (1 << 20)), "malloc");
  check(cudaMalloc(&x, max_rows * max_k * 2), "malloc");
  check(cudaMalloc(&x_codes, max_rows * max_k), "malloc");
  check(cudaMalloc(&x_scales, max_rows * max_k / 128 * 4 + 4096), "malloc");
  check(cudaMalloc(&out, max_rows * max_k * 4), "malloc");
  check(cudaMalloc(&workspace, size_t{32} << 20), "malloc");
  const int64_t split_workspace_floats = int64_t{16} << 20;
  check(cudaMalloc(&split_workspace, split_workspace_floats * sizeof(float)), "malloc");
  tern::bench::fill_random_e4m3<<<4096, 256, 0, stream>>>(codes, weight_bytes, 1);
  fill_random<<<4096, 256, 0, stream>>>(weight, weight_bytes, 2);
  fill_random<<<1024, 256, 0, stream>>>(x, max_rows * max_k, 3);
  tern::bench::fill_value<float><<<1024, 256, 0, stream>>>(weight_scales, weight_bytes / 128 / 128 * 2, 1.0f / 448);
  tern::cuda::Gemm gemm(stream, workspace, size_t{32} << 20);

  const auto quantize = [&](int64_t m, int64_t k) {
    tern::kernels::launch_quantize_rows_fp8(x, m, k, x_codes, x_scales, stream);
  };
  const auto fp8_gemm = [&](const __nv_fp8_e4m3* w, int64_t m, int64_t n, int64_t k) {
    tern::kernels::Fp8GemmParams p;
    p.x = x_codes;
    p.x_scales = x_scales;
    p.x_scale_stride = m;
    p.weight = block_fp8_codes(w, weight_scales, k);
    p.out = out;
    p.m = static_cast<int>(m);
    p.n = static_cast<int>(n);
    p.k = static_cast<int>(k);
    const int64_t floats = tern::kernels::fp8_gemm_workspace_floats(p.m, p.n, p.k);
    if (floats > split_workspace_floats) {
      std::fprintf(stderr, "fp8_linear_bench: split-K needs %lld floats\n", static_cast<long long>(floats));
      std::exit(1);
    }
    p.split_workspace = floats > 0 ? split_workspace : nullptr;
    tern::kernels::launch_fp8_gemm(p, stream);
  };

  struct Shape {
    const char* name;
    int64_t n, k;
  };
  const Shape compute_shapes[] = {{"8192^3", 8192, 8192}, {"qkv", 6144, 4096}, {"o_proj", 4096, 4096},
                                  {"gate_up", 28672, 4096}, {"down", 4096, 14336}};
  std::printf("%-8s %6s %14s %12s %12s %12s\n", "gemm", "m", "n x k", "bf16 TF/s", "fp8 TF/s", "+quant TF/s");
  for (const Shape& s : compute_shapes) {
    const int64_t m = s.n == 8192 ? 8192 : 4096;
    const double flop = 2.0 * m * s.n * s.k;
    quantize(m, s.k);
    const double bf16_ms = median_ms([&] { gemm.run(x, weight, nullptr, out, m, s.n, s.k); }, 5, 20, stream);
    const double fp8_ms = median_ms([&] { fp8_gemm(codes, m, s.n, s.k); }, 5, 20, stream);
    const double quantized_ms = median_ms(
        [&] {
          quantize(m, s.k);
          fp8_gemm(codes, m, s.n, s.k);
        },
        5, 20, stream);
    std::printf("%-8s %6lld %7lldx%-6lld %12.0f %12.0f %12.0f\n", s.name, static_cast<long long>(m),
                static_cast<long long>(s.n), static_cast<long long>(s.k), flop / (bf16_ms * 1e9),
                flop / (fp8_ms * 1e9), flop / (quantized_ms * 1e9));
  }

  const auto gemv = [&](const __nv_fp8_e4m3* w, int64_t n, int64_t k) {
    tern::kernels::GemvParams p;
    p.x = x;
    p.fp8 = block_fp8_codes(w, weight_scales, k);
    p.out = out;
    p.n = static_cast<int>(n);
    p.k = static_cast<int>(k);
    tern::kernels::launch_gemv(p, stream);
  };
  const auto few_rows = [&](const __nv_fp8_e4m3* w, int64_t m, int64_t n, int64_t k) {
    tern::kernels::FewRowsGemmParams p;
    p.x = x;
    p.fp8 = block_fp8_codes(w, weight_scales, k);
    p.out = out;
    p.m = static_cast<int>(m);
    p.n = static_cast<int>(n);
    p.k = static_cast<int>(k);
    tern::kernels::launch_few_rows_gemm(p, stream);
  };

  const Shape decode_shapes[] = {{"qkv", 6144, 4096}, {"o_proj", 4096, 4096}, {"gate_up", 28672, 4096},
                                 {"down", 4096, 14336}};
  constexpr int kGraphCalls = 20;
  std::printf("%-8s %4s %12s %-22s %10s %7s %8s\n", "linear", "m", "n x k", "kernel", "time (us)", "TB/s", "of copy");
  for (const Shape& s : decode_shapes) {
    // As many copies of the bf16 weight (2 GB) as of the codes (1 GB).
    const size_t copies = weight_bytes / static_cast<size_t>(s.n * s.k);
    const auto codes_of = [&](int call) { return codes + (call % copies) * s.n * s.k; };
    const auto weight_of = [&](int call) { return weight + (call % copies) * s.n * s.k; };
    for (const int64_t m : {1, 4, 8, 16}) {
      const auto report = [&](const char* kernel, double weight_bytes_per_value, double ms) {
        const double bytes = weight_bytes_per_value * s.n * s.k + 2.0 * m * (s.k + s.n);
        const double tbs = bytes / (ms * 1e-3) / 1e12;
        std::printf("%-8s %4lld %6lldx%-5lld %-22s %10.1f %7.2f %7.0f%%\n", s.name, static_cast<long long>(m),
                    static_cast<long long>(s.n), static_cast<long long>(s.k), kernel, ms * 1e3, tbs,
                    100 * tbs / copy_tbs);
      };
      const auto timed = [&](auto&& call) { return graph_median_ms(call, kGraphCalls, 3, 20, stream); };
      if (m == 1) {
        report("fp8 gemv", 1, timed([&](int i) { gemv(codes_of(i), s.n, s.k); }));
      }
      report("fp8 few rows", 1, timed([&](int i) { few_rows(codes_of(i), m, s.n, s.k); }));
      report("quantize + fp8 gemm", 1, timed([&](int i) {
               quantize(m, s.k);
               fp8_gemm(codes_of(i), m, s.n, s.k);
             }));
      report("bf16 cublas", 2, timed([&](int i) { gemm.run(x, weight_of(i), nullptr, out, m, s.n, s.k); }));
    }
  }
  // One decode step's linears back to back, as a recorded step runs them: 32 layers of distinct weights (7 GB, so
  // every weight comes from memory), each launched as a dependent of the one before.
  {
    std::vector<std::pair<__nv_fp8_e4m3*, Shape>> chain;
    size_t total_bytes = 0;
    for (int layer = 0; layer < 32; ++layer) {
      for (const Shape& s : decode_shapes) {
        __nv_fp8_e4m3* w;
        check(cudaMalloc(&w, s.n * s.k), "malloc");
        tern::bench::fill_random_e4m3<<<4096, 256, 0, stream>>>(w, s.n * s.k, layer + 3);
        chain.push_back({w, s});
        total_bytes += s.n * s.k;
      }
    }
    const auto report_chain = [&](const char* what, double ms) {
      std::printf("one decode step's %zu FP8 linears back to back, %s: %.3f ms for %.2f GB, %.2f TB/s (%.0f%% of "
                  "copy)\n",
                  chain.size(), what, ms, total_bytes / 1e9, total_bytes / (ms * 1e-3) / 1e12,
                  100 * total_bytes / (ms * 1e-3) / 1e12 / copy_tbs);
    };
    report_chain("batch 1, gemv", graph_median_ms(
                                      [&](int) {
                                        for (const auto& [w, s] : chain) gemv(w, s.n, s.k);
                                      },
                                      1, 2, 10, stream));
    for (const int64_t m : {1, 8, 16}) {
      const std::string what = "batch " + std::to_string(m) + ", few rows";
      report_chain(what.c_str(), graph_median_ms(
                                     [&](int) {
                                       for (const auto& [w, s] : chain) few_rows(w, m, s.n, s.k);
                                     },
                                     1, 2, 10, stream));
    }
    report_chain("batch 8, quantize + fp8 gemm", graph_median_ms(
                                                     [&](int) {
                                                       for (const auto& [w, s] : chain) {
                                                         quantize(8, s.k);
                                                         fp8_gemm(w, 8, s.n, s.k);
                                                       }
                                                     },
                                                     1, 2, 10, stream));
    for (const auto& link : chain) check(cudaFree(link.first), "free");
  }
  return 0;
}
