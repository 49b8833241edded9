#pragma once
// The shared-memory layout the wgmma prefill kernel (prefill_attention_wgmma_kernel.cuh) keeps Q, K and V tiles in,
// and the wgmma matrix descriptors that describe it. Plain constexpr arithmetic, callable from host and device, so
// that tests/kernels/attention/smem_swizzle_test.cpp checks it on the CPU.
//
// A tile of `rows` rows x head_dim bf16 columns is stored as head_dim / 64 column blocks of 64 columns (128 bytes
// a row). Within a column block, row r takes 128 bytes at r * 128, and its eight 16-byte chunks are permuted by
// the 128-byte swizzle: chunk c sits at ((c ^ (r % 8)) * 16). This is the PTX ISA's 128B swizzle mode
// (CuTe's Swizzle<3,4,3>: byte-address bits [4,7) XOR bits [7,10)) applied to a row-major [rows][64] block whose
// base is 1024-byte aligned, so that address bits [7,10) are exactly r % 8. Eight rows make one 1024-byte
// swizzle atom; atoms follow each other along the rows.
//
// The same storage serves both kinds of wgmma operand:
// - K-major (Q as A, K as B of S = Q K^T; the reduction runs along head_dim, contiguous in a row): canonical
//   layout ((8,m),(T,2k)):((8T,SBO),(1,T)) with T = 8 bf16 (16 bytes): 8 rows 128 bytes apart, then the next 8
//   rows at SBO = 1024 bytes. LBO is unused for swizzled K-major layouts (a k16 step, 32 bytes, stays inside one
//   128-byte row); the k16 step j of column block b starts at b * rows * 128 + (j % 4) * 32 bytes, the offset the
//   hardware adds before it applies the XOR, exactly as the stores did.
// - MN-major (V as B of O = P V: the reduction runs along the keys, i.e. the rows, and N = head_dim is
//   contiguous): canonical layout ((T,8,m),(8,k)):((1,T,LBO),(8T,SBO)): 64 contiguous columns (128 bytes), the
//   next 64 columns (next column block) LBO = rows * 128 bytes further, 8 keys 128 bytes apart, the next 8 keys
//   SBO = 1024 bytes further. The k16 step j (keys 16j..16j+15) starts at j * 16 * 128 bytes, atom-aligned.
#include <cstdint>

#include "common/host_device.h"

namespace tern::kernels::swizzle128 {

constexpr int kRowBytes = 128;    // one row of a 64-column bf16 block
constexpr int kChunkBytes = 16;   // the swizzle permutes 16-byte chunks
constexpr int kAtomBytes = 1024;  // 8 rows: the period of the XOR pattern, and the required base alignment

// Byte offset of the 16-byte chunk `chunk` (columns 8 * chunk .. 8 * chunk + 7) of row `row` in a tile of `rows`
// rows. A 16-byte cp.async of those 8 columns lands exactly there.
TERN_HOST_DEVICE constexpr uint32_t chunk_offset(int rows, int row, int chunk) {
  const int block = chunk / 8;
  const int chunk_in_row = (chunk % 8) ^ (row % 8);
  return static_cast<uint32_t>(block * rows * kRowBytes + row * kRowBytes + chunk_in_row * kChunkBytes);
}

// Byte offset of element (row, col) of such a tile.
TERN_HOST_DEVICE constexpr uint32_t element_offset(int rows, int row, int col) {
  return chunk_offset(rows, row, col / 8) + static_cast<uint32_t>((col % 8) * 2);
}

// Fields of a wgmma shared-memory matrix descriptor (PTX ISA, "Matrix Descriptor Format"):
// bits [0,14) start address >> 4, [16,30) leading dimension byte offset >> 4, [32,46) stride dimension byte
// offset >> 4, [49,52) base offset (0: atoms 1024-byte aligned), [62,64) swizzle mode (1: 128-byte swizzle).
constexpr uint64_t kDescriptorSwizzle128 = 1;

TERN_HOST_DEVICE constexpr uint64_t descriptor(uint32_t smem_address, uint32_t leading_bytes, uint32_t stride_bytes) {
  return static_cast<uint64_t>((smem_address >> 4) & 0x3FFF) |
         (static_cast<uint64_t>((leading_bytes >> 4) & 0x3FFF) << 16) |
         (static_cast<uint64_t>((stride_bytes >> 4) & 0x3FFF) << 32) | (kDescriptorSwizzle128 << 62);
}

// A (Q) or B (K) of S = Q K^T: the k16 step `k_step` of the 64 rows from `first_row` of a K-major tile at
// `tile_address` (1024-byte aligned) holding `rows` rows. LBO is unused here; 16 bytes is the customary value.
TERN_HOST_DEVICE constexpr uint64_t k_major_descriptor(uint32_t tile_address, int rows, int first_row, int k_step) {
  const uint32_t address = tile_address + static_cast<uint32_t>((k_step / 4) * rows * kRowBytes +
                                                                first_row * kRowBytes + (k_step % 4) * 32);
  return descriptor(address, kChunkBytes, kAtomBytes);
}

// B (V) of O = P V: the k16 step `k_step` (keys 16 k_step .. 16 k_step + 15) of an MN-major tile at
// `tile_address` holding `rows` keys, all head_dim columns (column blocks LBO = rows * 128 bytes apart).
TERN_HOST_DEVICE constexpr uint64_t mn_major_descriptor(uint32_t tile_address, int rows, int k_step) {
  const uint32_t address = tile_address + static_cast<uint32_t>(k_step * 16 * kRowBytes);
  return descriptor(address, static_cast<uint32_t>(rows * kRowBytes), kAtomBytes);
}

}  // namespace tern::kernels::swizzle128
