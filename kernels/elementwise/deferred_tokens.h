#pragma once
// Overlap scheduling: a step is launched before the host has read the previous step's sampled ids, so the tokens
// that are those ids get their values on the device, just before the step's forward reads them.
#include <cuda_runtime.h>

#include <cstdint>

namespace tern::kernels {

// token_ids[token_index[i]] = previous_ids[previous_row[i]] for i < count. Indices are checked by the caller.
void launch_fill_deferred_tokens(int32_t* token_ids, const int32_t* token_index, const int32_t* previous_row,
                                 int count, const int32_t* previous_ids, cudaStream_t stream);

}  // namespace tern::kernels
