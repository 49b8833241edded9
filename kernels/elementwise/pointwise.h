#pragma once
// Memory-bound pointwise and row-copy kernels over bf16 activations.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace tern::kernels {

// out[r, i] = silu(gate_up[r, i]) * gate_up[r, width + i]
void launch_silu_mul(const __nv_bfloat16* gate_up, __nv_bfloat16* out, int64_t num_rows, int64_t width,
                     cudaStream_t stream);
// x += y, element by element
void launch_add(__nv_bfloat16* x, const __nv_bfloat16* y, int64_t count, cudaStream_t stream);
void launch_f32_to_bf16(const float* src, __nv_bfloat16* dst, int64_t count, cudaStream_t stream);
void launch_bf16_to_f32(const __nv_bfloat16* src, float* dst, int64_t count, cudaStream_t stream);
// The row ids a table holds: [first_row, first_row + num_rows) (one rank's shard of a vocab-parallel embedding).
struct GatherRange {
  int64_t first_row = 0;
  int64_t num_rows = INT64_MAX;
};

// `rows` rows of `row_bytes` bytes from src (rows src_pitch bytes apart) to dst (dst_pitch apart): column slices and
// concatenations. A kernel rather than cudaMemcpy2DAsync, whose copy-engine transfers no kernel overlaps (the three
// q/k/v slices of a 128-token prefill's layer spanned 47 us between the kernels around them on the H200;
// docs/BENCHMARKS.md).
void launch_copy_2d(void* dst, int64_t dst_pitch, const void* src, int64_t src_pitch, int64_t row_bytes,
                    int64_t rows, cudaStream_t stream);

// out[r] = table[rows[r] - range.first_row] for rows of row_bytes bytes (a multiple of 2), zeros for a row outside
// `range`; ids are checked by the caller.
void launch_gather_rows(const void* table, const int32_t* rows, void* out, int64_t num_rows, int64_t row_bytes,
                        cudaStream_t stream, GatherRange range = {});

}  // namespace tern::kernels
