#pragma once
// TMA tensor maps (cp.async.bulk.tensor, sm_90): the descriptor of a global array and the box that one copy moves,
// built on the host and handed to a kernel as a __grid_constant__ parameter. The encoder is the driver's
// cuTensorMapEncodeTiled, reached through the runtime's entry-point query so that nothing links libcuda.
#include <cuda.h>

#include <cstdint>

namespace tern::kernels {

// A 3-d bf16 array of dims[0] x dims[1] x dims[2] elements (dims[0] contiguous; byte_strides are those of dims 1
// and 2, in any order), copied in boxes of box[0] x box[1] x box[2] elements that land in shared memory with
// dims[0] fastest, with the 128-byte swizzle (box[0] * 2 must be at most 128 bytes: smem_swizzle.h's column
// blocks). Throws std::runtime_error when the driver rejects the description.
CUtensorMap bf16_tensor_map_3d_swizzle128(const void* base, const uint64_t (&dims)[3],
                                          const uint64_t (&byte_strides)[2], const uint32_t (&box)[3]);

}  // namespace tern::kernels
