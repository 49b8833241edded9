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

// A matrix of `rows` rows of `row_bytes` one-byte elements (e4m3 codes), rows `row_stride` bytes apart (a multiple
// of 16), copied in boxes of box_bytes (64 or 128) x box_rows rows that land as rows of box_bytes with the swizzle
// of that span: the 16-byte chunk c of row r at chunk c ^ (r % 8) for 128-byte rows (smem_swizzle.h's layout),
// c ^ (r / 2 % 4) for 64-byte rows (destinations 1024-byte aligned). Elements outside the matrix arrive as zeros.
CUtensorMap byte_tensor_map_2d_swizzled(const void* base, uint64_t row_bytes, uint64_t rows, uint64_t row_stride,
                                        uint32_t box_bytes, uint32_t box_rows);

}  // namespace tern::kernels
