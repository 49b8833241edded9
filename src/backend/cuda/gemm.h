#pragma once
// bf16 GEMMs through cuBLASLt with float32 accumulation: out [M, N] = x [M, K] * weight [N, K]^T (+ bias [N]),
// written as bf16, or as float32 (with a float32 bias) where the caller sums partial products first (row-parallel
// linears) or needs the precision (router logits).
// Grouped GEMMs run G such products side by side as one strided-batched cuBLASLt call (MLA's per-head projections).
// (Block-FP8 GEMMs are kernels/linear/fp8_gemm: cuBLASLt 13.1 has no block-scaled FP8 algorithm on sm_90.)
// The algorithm for each shape (and pointer alignment) is chosen once, by cuBLASLt's heuristic, and reused.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <tuple>

namespace tern::cuda {

class Gemm {
 public:
  Gemm(cudaStream_t stream, void* workspace, size_t workspace_bytes);
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  void run(const void* x, const void* weight, const void* bias, void* out, int64_t m, int64_t n, int64_t k,
           bool f32_out = false);
  // out [M, G, N] (bf16) = x [M, G, K] times weight [G, N, K] transposed, group by group.
  void run_grouped(const void* x, const void* weight, void* out, int64_t m, int64_t n, int64_t k, int64_t groups);

 private:
  struct Plan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
  };
  // m, n, k, bias, alignment bytes, f32 out, groups
  using Key = std::tuple<int64_t, int64_t, int64_t, bool, int, bool, int64_t>;
  // The plan for `key`; a shape without an algorithm fails.
  Plan& plan(const Key& key);
  // Runs p's algorithm (with its bias pointer set to `bias`, if any) on the stream.
  void matmul(Plan& p, const void* x, const void* weight, const void* bias, void* out, const char* what);

  cublasLtHandle_t handle_ = nullptr;
  cudaStream_t stream_;
  void* workspace_;
  size_t workspace_bytes_;
  std::map<Key, Plan> plans_;
};

}  // namespace tern::cuda
