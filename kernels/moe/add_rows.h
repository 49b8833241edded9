#pragma once
// The combine of the data-parallel MoE token exchange (Backend::add_rows): rows of x added into rows of out, several
// into one row in the order of their indices, accumulated in float32.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace tern::kernels {

// The rows of x grouped by the row of out they add into, laid out on the host from the targets: row
// target_rows[g] of out receives rows sources[source_begin[g]], ..., sources[source_begin[g + 1] - 1] of x, in
// ascending order.
struct RowsByTarget {
  const int32_t* target_rows = nullptr;   // [num_targets], distinct
  const int32_t* source_begin = nullptr;  // [num_targets + 1]
  const int32_t* sources = nullptr;       // [source_begin[num_targets]]
  int num_targets = 0;
};

// out[t] = out[t] + x[s0] + x[s1] + ... for each target row t and its sources s0 < s1 < ..., summed left to right
// in float32 and rounded to Out once (not at all for float32): for a float32 out this is exactly the CPU backend's
// out[t] += x[i] for i in order. Out and In are float or __nv_bfloat16; rows are `width` elements.
template <typename Out, typename In>
void launch_add_rows(Out* out, const In* x, int64_t width, const RowsByTarget& rows, cudaStream_t stream);

}  // namespace tern::kernels
