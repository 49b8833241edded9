// The wgmma prefill kernel's shared-memory layout and matrix descriptors (kernels/attention/smem_swizzle.h)
// against the PTX ISA's definitions: the 128-byte swizzle as an address-bit XOR, and the canonical K-major and
// MN-major layouts a descriptor stands for, read back the way the tensor cores address them.
#include "attention/smem_swizzle.h"

#include <gtest/gtest.h>

#include <set>

namespace tern::kernels::swizzle128 {
namespace {

// The 128-byte swizzle mode: byte-address bits [4,7) XOR bits [7,10) (CuTe's Swizzle<3,4,3>).
uint32_t swizzle_address(uint32_t address) { return address ^ (((address >> 7) & 7) << 4); }

struct Fields {
  uint32_t start, leading, stride, base_offset, mode;
};
Fields decode(uint64_t desc) {
  return {static_cast<uint32_t>(desc & 0x3FFF) << 4, static_cast<uint32_t>((desc >> 16) & 0x3FFF) << 4,
          static_cast<uint32_t>((desc >> 32) & 0x3FFF) << 4, static_cast<uint32_t>((desc >> 49) & 7),
          static_cast<uint32_t>(desc >> 62)};
}

// Address of element (mn, k) of a k16 step, as the canonical K-major 128B-swizzle layout
// ((8,m),(T,2k)):((8T,SBO),(1,T)) with T = 8 bf16 places it: rows 128 bytes apart in groups of 8 SBO apart,
// k contiguous; then the swizzle on the absolute address.
uint32_t k_major_read(uint64_t desc, int mn, int k) {
  const Fields f = decode(desc);
  return swizzle_address(f.start + (mn / 8) * f.stride + (mn % 8) * 128 + k * 2);
}

// The canonical MN-major 128B-swizzle layout ((T,8,m),(8,k)):((1,T,LBO),(8T,SBO)): 64 contiguous mn, the next
// 64 LBO further; k rows 128 bytes apart in groups of 8 SBO apart.
uint32_t mn_major_read(uint64_t desc, int mn, int k) {
  const Fields f = decode(desc);
  return swizzle_address(f.start + (mn % 64) * 2 + (mn / 64) * f.leading + (k % 8) * 128 + (k / 8) * f.stride);
}

class SwizzleTest : public ::testing::TestWithParam<int> {};

TEST_P(SwizzleTest, StoresAreTheSwizzledRowMajorBlocks) {
  const int head_dim = GetParam();
  const int rows = 128;
  std::set<uint32_t> offsets;
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < head_dim; ++c) {
      const uint32_t block_base = static_cast<uint32_t>((c / 64) * rows * 128);
      const uint32_t plain = static_cast<uint32_t>(r * 128 + (c % 64) * 2);
      EXPECT_EQ(element_offset(rows, r, c), block_base + swizzle_address(plain)) << "row " << r << " col " << c;
    }
    for (int chunk = 0; chunk < head_dim / 8; ++chunk) {
      const uint32_t offset = chunk_offset(rows, r, chunk);
      EXPECT_EQ(offset % 16, 0u);
      EXPECT_LT(offset, static_cast<uint32_t>(rows * head_dim * 2));
      offsets.insert(offset);
    }
  }
  EXPECT_EQ(offsets.size(), static_cast<size_t>(rows * head_dim / 8)) << "two chunks share an address";
}

TEST_P(SwizzleTest, KMajorDescriptorsReadWhatWasStored) {
  const int head_dim = GetParam();
  const int rows = 128;
  const uint32_t tile = 3 * kAtomBytes;  // any 1024-byte aligned shared address
  for (int first_row : {0, 64}) {
    for (int k_step = 0; k_step < head_dim / 16; ++k_step) {
      const uint64_t desc = k_major_descriptor(tile, rows, first_row, k_step);
      EXPECT_EQ(decode(desc).mode, 1u);
      EXPECT_EQ(decode(desc).base_offset, 0u);
      for (int mn = 0; mn < 64; ++mn) {
        for (int k = 0; k < 16; ++k) {
          ASSERT_EQ(k_major_read(desc, mn, k), tile + element_offset(rows, first_row + mn, 16 * k_step + k))
              << "row " << first_row + mn << " k step " << k_step << " k " << k;
        }
      }
    }
  }
}

TEST_P(SwizzleTest, KMajorDescriptorsCoverAllKeysOfATile) {
  const int head_dim = GetParam();
  const int keys = 128;  // S = Q K^T takes all 128 keys of a tile as N in one wgmma
  const uint32_t tile = 36 * kAtomBytes;
  for (int k_step = 0; k_step < head_dim / 16; ++k_step) {
    const uint64_t desc = k_major_descriptor(tile, keys, 0, k_step);
    for (int key = 0; key < keys; ++key) {
      for (int k = 0; k < 16; ++k) {
        ASSERT_EQ(k_major_read(desc, key, k), tile + element_offset(keys, key, 16 * k_step + k));
      }
    }
  }
}

TEST_P(SwizzleTest, MnMajorDescriptorsReadWhatWasStored) {
  const int head_dim = GetParam();
  const int keys = 128;
  const uint32_t tile = 100 * kAtomBytes;
  for (int k_step = 0; k_step < keys / 16; ++k_step) {
    const uint64_t desc = mn_major_descriptor(tile, keys, k_step);
    EXPECT_EQ(decode(desc).mode, 1u);
    for (int n = 0; n < head_dim; ++n) {
      for (int k = 0; k < 16; ++k) {
        ASSERT_EQ(mn_major_read(desc, n, k), tile + element_offset(keys, 16 * k_step + k, n))
            << "column " << n << " key " << 16 * k_step + k;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(HeadDims, SwizzleTest, ::testing::Values(64, 128));

TEST(SwizzleDescriptor, PacksFieldsWhereThePtxIsaPutsThem) {
  const uint64_t desc = descriptor(0x2F400, 16384, 1024);
  EXPECT_EQ(desc & 0x3FFF, 0x2F400u >> 4);
  EXPECT_EQ((desc >> 16) & 0x3FFF, 16384u >> 4);
  EXPECT_EQ((desc >> 32) & 0x3FFF, 1024u >> 4);
  EXPECT_EQ((desc >> 49) & 7, 0u);
  EXPECT_EQ(desc >> 62, 1u);
  const uint64_t reserved = (uint64_t{3} << 14) | (uint64_t{3} << 30) | (uint64_t{7} << 46) | (uint64_t{0x3FF} << 52);
  EXPECT_EQ(desc & reserved, 0u);
}

}  // namespace
}  // namespace tern::kernels::swizzle128
