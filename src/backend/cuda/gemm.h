#pragma once
// bf16 GEMMs through cuBLASLt with float32 accumulation: out [M, N] = x [M, K] * weight [N, K]^T (+ bias [N]),
// written as bf16, or as float32 (with a float32 bias) where the caller sums partial products first (row-parallel
// linears) or needs the precision (router logits).
// Grouped GEMMs run G such products side by side as one strided-batched cuBLASLt call (MLA's per-head projections).
// Block-FP8 GEMMs multiply e4m3 activations and weights with cuBLASLt's block scaling (CUDA 12.9+ on sm_90:
// CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F for the activations, BLK128x128_32F for the weight), DeepSeek-V3's W8A8
// scheme, as PyTorch's torch._scaled_mm does with its BlockWise1x128 and BlockWise128x128 recipes.
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
  // out [M, N] (bf16, or float32) = x times weight transposed, both block FP8, bias as run's: x's e4m3 codes [M, K]
  // with float32 scales per row and 128 columns, [ceil(K / 128), M] (kernels/linear/block_fp8.h); the weight's codes
  // [N, K] with scales per 128x128 block, [ceil(N / 128), ceil(K / 128) rounded up to 4] (backend/block_fp8_layout.h).
  // M a multiple of 4, K of 16; the shape needs an algorithm (has_block_fp8).
  void run_block_fp8(const void* x, const float* x_scales, const void* weight, const float* weight_scales,
                     const void* bias, void* out, int64_t m, int64_t n, int64_t k, bool f32_out);
  // Whether cuBLASLt has a block-scaled FP8 algorithm for run_block_fp8 on these operands, asked before the
  // activations are quantized for it (once per shape: the plan is kept).
  bool has_block_fp8(const void* x, const void* weight, const void* bias, const void* out, int64_t m, int64_t n,
                     int64_t k, bool f32_out);

 private:
  struct Plan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
    bool has_algo = false;
  };
  // m, n, k, bias, alignment bytes, f32 out, groups, block FP8
  using Key = std::tuple<int64_t, int64_t, int64_t, bool, int, bool, int64_t, bool>;
  // The plan for `key`; a bf16 shape without an algorithm fails, a block-FP8 one comes back without one.
  Plan& plan(const Key& key);
  Plan& block_fp8_plan(const void* x, const void* weight, const void* bias, const void* out, int64_t m, int64_t n,
                       int64_t k, bool f32_out);
  // Runs p's algorithm (with its bias pointer set to `bias`, if any) on the stream.
  void matmul(Plan& p, const void* x, const void* weight, const void* bias, void* out, const char* what);

  cublasLtHandle_t handle_ = nullptr;
  cudaStream_t stream_;
  void* workspace_;
  size_t workspace_bytes_;
  std::map<Key, Plan> plans_;
};

}  // namespace tern::cuda
