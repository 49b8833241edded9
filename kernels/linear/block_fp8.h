#pragma once
// Block FP8 around the FP8 GEMM (fp8_gemm.h), DeepSeek-V3's W8A8 "dynamic" scheme: activations quantized per token
// and 128 channels before the GEMM, and a weight's codes dequantized to bf16 for the ops that have no FP8 kernel.
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace tern::kernels {

// A block-FP8 weight as the kernels read it (backend/block_fp8_layout.h): e4m3 codes, rows of k, and float32 scales
// of 128x128 blocks of those rows, scales[r / 128 * scale_stride + c / 128].
struct BlockFp8Codes {
  const __nv_fp8_e4m3* codes = nullptr;
  const float* scales = nullptr;
  int scale_stride = 0;

  // Set, with a scale for every block of rows of k columns.
  bool covers(int64_t k) const { return codes && scales && scale_stride >= (k + 127) / 128; }
};

// x [m, k] (bf16, rows k apart) to e4m3 codes [m, k] and float32 scales [ceil(k / 128), m] (a scale per row and
// 128 columns, rows contiguous, as fp8_gemm reads them): per row and 128 columns scale = amax / 448 (1 for a block
// of zeros) and code = the e4m3 nearest value / scale, as DeepSeek's inference/kernel.py act_quant and
// transformers' finegrained_fp8 act_quant compute them. k a multiple of 16.
void launch_quantize_rows_fp8(const __nv_bfloat16* x, int64_t m, int64_t k, __nv_fp8_e4m3* codes, float* scales,
                              cudaStream_t stream);

// The same for x [rows, k] in groups of rows (MoE experts' gathered inputs, each group a multiple of 4 rows):
// group_rows ([num_groups + 1] on the device, the last at most `rows`: rows past it are left alone) gives where
// each starts. Each group's scales are its
// own layout, [ceil(k / 128), its rows], after the groups' before it (group g's from group_rows[g] *
// ceil(k / 128)), so that one GEMM per group reads its rows' codes and scales as a matrix of their own.
void launch_quantize_row_groups_fp8(const __nv_bfloat16* x, const int32_t* group_rows, int num_groups, int64_t rows,
                                    int64_t k, __nv_fp8_e4m3* codes, float* scales, cudaStream_t stream);

// out [rows, columns] (bf16) = codes [rows, columns] times scales[r / 128 * scale_stride + c / 128].
void launch_dequantize_block_fp8(const __nv_fp8_e4m3* codes, const float* scales, int64_t rows, int64_t columns,
                                 int64_t scale_stride, __nv_bfloat16* out, cudaStream_t stream);

}  // namespace tern::kernels
