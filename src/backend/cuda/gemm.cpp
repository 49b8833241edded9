#include "backend/cuda/gemm.h"

#include <algorithm>
#include <utility>

#include "backend/cuda/cuda_check.h"

namespace tern::cuda {

namespace {

int alignment_of(const void* p) {
  const auto address = reinterpret_cast<uintptr_t>(p);
  int align = 256;
  while (align > 2 && address % align != 0) align /= 2;
  return align;
}

// The alignment every operand of a GEMM has (the bias only where there is one), as its plan is keyed.
int operand_alignment(const void* x, const void* weight, const void* bias, const void* out) {
  return std::min({alignment_of(x), alignment_of(weight), alignment_of(out), bias ? alignment_of(bias) : 256});
}

}  // namespace

Gemm::Gemm(cudaStream_t stream, void* workspace, size_t workspace_bytes)
    : stream_(stream), workspace_(workspace), workspace_bytes_(workspace_bytes) {
  check(cublasLtCreate(&handle_), "cublasLtCreate");
}

Gemm::~Gemm() {
  for (auto& [key, p] : plans_) {
    cublasLtMatrixLayoutDestroy(p.a);
    cublasLtMatrixLayoutDestroy(p.b);
    cublasLtMatrixLayoutDestroy(p.c);
    cublasLtMatmulDescDestroy(p.desc);
  }
  cublasLtDestroy(handle_);
}

Gemm::Plan& Gemm::plan(const Key& key) {
  auto found = plans_.find(key);
  if (found != plans_.end()) return found->second;
  const auto [m, n, k, has_bias, align, f32_out, groups] = key;
  Plan p;
  // Column-major view: out^T [N, M] = weight [K, N]^T * x^T [K, M].
  check(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "matmul desc");
  const cublasOperation_t trans = CUBLAS_OP_T, no_trans = CUBLAS_OP_N;
  check(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &trans, sizeof(trans)), "transa");
  check(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &no_trans, sizeof(no_trans)), "transb");
  if (has_bias) {
    const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
    // The bias has the output's type: cuBLASLt has no bf16 bias for float32 outputs.
    const cudaDataType_t bias_type = f32_out ? CUDA_R_32F : CUDA_R_16BF;
    check(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)),
          "epilogue");
    check(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof(bias_type)),
          "bias type");
  }
  // Groups: x's and out's rows hold every group's columns (leading dimensions G * K and G * N), group g's start
  // g * K and g * N elements in; weight g starts g * N * K elements in.
  check(cublasLtMatrixLayoutCreate(&p.a, CUDA_R_16BF, k, n, k), "layout A");
  check(cublasLtMatrixLayoutCreate(&p.b, CUDA_R_16BF, k, m, groups * k), "layout B");
  check(cublasLtMatrixLayoutCreate(&p.c, f32_out ? CUDA_R_32F : CUDA_R_16BF, n, m, groups * n), "layout C");
  if (groups > 1) {
    const int32_t count = static_cast<int32_t>(groups);
    const std::pair<cublasLtMatrixLayout_t, int64_t> strides[] = {{p.a, n * k}, {p.b, k}, {p.c, n}};
    for (const auto& [layout, stride] : strides) {
      check(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)),
            "batch count");
      check(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                                             sizeof(stride)),
            "batch stride");
    }
  }

  cublasLtMatmulPreference_t pref;
  check(cublasLtMatmulPreferenceCreate(&pref), "preference");
  const uint64_t workspace = workspace_bytes_;
  const uint32_t align_bytes = static_cast<uint32_t>(align);
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace, sizeof(workspace));
  for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES}) {
    cublasLtMatmulPreferenceSetAttribute(pref, attr, &align_bytes, sizeof(align_bytes));
  }
  cublasLtMatmulHeuristicResult_t result{};
  int found_count = 0;
  const cublasStatus_t status =
      cublasLtMatmulAlgoGetHeuristic(handle_, p.desc, p.a, p.b, p.c, p.c, pref, 1, &result, &found_count);
  cublasLtMatmulPreferenceDestroy(pref);
  if (status != CUBLAS_STATUS_SUCCESS || found_count == 0) {
    fail("cuda backend: linear: cuBLASLt has no bf16 algorithm for {} groups of [{}, {}] x [{}, {}]^T (status {})",
         groups, m, k, n, k, static_cast<int>(status));
  }
  p.algo = result.algo;
  return plans_.emplace(key, p).first->second;
}

void Gemm::matmul(Plan& p, const void* x, const void* weight, const void* bias, void* out, const char* what) {
  if (bias) {
    check(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)),
          "bias pointer");
  }
  const float alpha = 1.0f, beta = 0.0f;
  check(cublasLtMatmul(handle_, p.desc, &alpha, weight, p.a, x, p.b, &beta, out, p.c, out, p.c, &p.algo, workspace_,
                       workspace_bytes_, stream_),
        what);
}

void Gemm::run(const void* x, const void* weight, const void* bias, void* out, int64_t m, int64_t n, int64_t k,
               bool f32_out) {
  if (m == 0 || n == 0) return;
  const int align = operand_alignment(x, weight, bias, out);
  matmul(plan({m, n, k, bias != nullptr, align, f32_out, 1}), x, weight, bias, out, "linear (cublasLtMatmul)");
}

void Gemm::run_grouped(const void* x, const void* weight, void* out, int64_t m, int64_t n, int64_t k,
                       int64_t groups) {
  if (m == 0 || n == 0 || groups == 0) return;
  // Every group's matrices must be as aligned as the plan says: the group strides count as much as the bases.
  const auto offset = [](const void* p, int64_t elements) { return static_cast<const char*>(p) + elements * 2; };
  const int align = std::min({alignment_of(x), alignment_of(offset(x, k)), alignment_of(weight),
                              alignment_of(offset(weight, n * k)), alignment_of(out), alignment_of(offset(out, n))});
  matmul(plan({m, n, k, false, align, false, groups}), x, weight, nullptr, out,
         "grouped_linear (cublasLtMatmul)");
}

}  // namespace tern::cuda
