// The TMA + wgmma GEMMs' work division (kernels/linear/wgmma_gemm_schedule.h): every output tile and K slice of a
// product belongs to exactly one unit, split-K only where the tiles leave SMs idle, and no unit with an empty range.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <tuple>
#include <utility>
#include <vector>

#include "linear/wgmma_gemm_schedule.h"

namespace tern::kernels::wgmma_gemm {
namespace {

constexpr int kSms = 132;

void expect_every_tile_and_slice_once(int m, int n, int k, bool may_split, bool wide_tiles) {
  const Schedule s = make_schedule(m, n, k, kSms, may_split, wide_tiles);
  std::map<std::tuple<int, int, int>, int> covered;  // (m0, n0, slice) -> units
  for (int unit = 0; unit < s.units(); ++unit) {
    const Tile t = s.tile(unit);
    ASSERT_LT(t.m0, m);
    ASSERT_LT(t.n0, n);
    ASSERT_EQ(t.m0 % s.tile_m, 0);
    ASSERT_EQ(t.n0 % s.tile_n, 0);
    ASSERT_LT(t.first_slice, t.end_slice) << "unit " << unit << " of [" << m << ", " << n << ", " << k << "]";
    ASSERT_LT(t.split, s.splits);
    for (int slice = t.first_slice; slice < t.end_slice; ++slice) ++covered[{t.m0, t.n0, slice}];
  }
  const int slices = (k + kTileK - 1) / kTileK;
  EXPECT_EQ(covered.size(), static_cast<size_t>(s.m_tiles) * s.n_tiles * slices) << m << " x " << n << " x " << k;
  for (const auto& [at, count] : covered) EXPECT_EQ(count, 1);
}

TEST(WgmmaGemmScheduleTest, EveryTileAndSliceBelongsToOneUnit) {
  for (const bool wide_tiles : {false, true}) {
    for (const bool may_split : {false, true}) {
      for (const int m : {1, 2, 16, 64, 65, 128, 300, 1100, 4096}) {
        for (const int n : {128, 200, 4096, 28672}) {
          for (const int k : {16, 320, 4096, 14336}) {
            expect_every_tile_and_slice_once(m, n, k, may_split, wide_tiles);
          }
        }
      }
    }
  }
}

TEST(WgmmaGemmScheduleTest, SplitsKOnlyWhereTilesLeaveSmsIdle) {
  // Decode rows of the 8B model's o_proj: 32 tiles for 132 SMs, so 4 ranges of 8 slices.
  const Schedule decode = make_schedule(16, 4096, 4096, kSms, true, true);
  EXPECT_EQ(decode.tile_m, 64);
  EXPECT_EQ(decode.splits, 4);
  EXPECT_EQ(decode.slices_per_split, 8);
  EXPECT_EQ(make_schedule(16, 4096, 4096, kSms, false, true).splits, 1);  // no workspace
  // 224 tiles of gate_up fill the SMs; so do prefill rows.
  EXPECT_EQ(make_schedule(16, 28672, 4096, kSms, true, true).splits, 1);
  EXPECT_EQ(make_schedule(4096, 4096, 4096, kSms, true, true).splits, 1);
  EXPECT_EQ(make_schedule(4096, 4096, 4096, kSms, true, true).tile_m, 128);
  // Never more ranges than slices: 3 tiles, 4 slices.
  const Schedule short_k = make_schedule(2, 384, 512, kSms, true, true);
  EXPECT_EQ(short_k.splits, 4);
  EXPECT_EQ(short_k.slices_per_split, 1);
}

TEST(WgmmaGemmScheduleTest, ConcurrentUnitsShareABandOfRowTiles) {
  // The first 132 units of an 8192^3 product: 8 row tiles (of 128) by 17 column tiles (of 256), not 2 row tiles
  // by 32.
  const Schedule s = make_schedule(8192, 8192, 8192, kSms, false, true);
  EXPECT_EQ(s.tile_n, kWideTileN);
  std::map<int, int> rows, columns;
  for (int unit = 0; unit < kSms; ++unit) {
    const Tile t = s.tile(unit);
    ++rows[t.m0];
    ++columns[t.n0];
  }
  EXPECT_EQ(rows.size(), static_cast<size_t>(kBandTiles));
  EXPECT_EQ(columns.size(), 17u);
}

// Plain products take 256-column tiles only where those still give every SM a tile; else 128, split where K allows.
TEST(WgmmaGemmScheduleTest, WideTilesOnlyWhereTheyFillTheSms) {
  EXPECT_EQ(make_schedule(4096, 4096, 4096, kSms, true, true).tile_n, kWideTileN);  // 32 x 16 tiles
  EXPECT_EQ(make_schedule(1024, 4096, 4096, kSms, true, true).tile_n, kTileN);      // 8 x 16 would leave SMs idle
  EXPECT_EQ(make_schedule(64, 28672, 4096, kSms, true, true).tile_n, kTileN);       // 64-row tiles
  EXPECT_EQ(make_schedule(8192, 128, 4096, kSms, true, true).tile_n, kTileN);       // one column tile of 128
}

// Block-FP8 products keep 128-column tiles (a second partial sum in their registers), plain or grouped.
TEST(WgmmaGemmScheduleTest, BlockFp8TilesStayNarrow) {
  EXPECT_EQ(make_schedule(8192, 8192, 8192, kSms, true, false).tile_n, kTileN);
  EXPECT_EQ(make_schedule(4096, 28672, 4096, kSms, true, false).tile_n, kTileN);
  EXPECT_EQ(grouped_schedule(73728, 1536, 2048, 128, 65536, false).tile_n, kTileN);
}

// MoE experts in one launch: each expert's rows (none, a few, several tiles' worth) times each column tile exactly
// once, in tiles of that expert's rows only, whatever the split of the rows; the units past them are not valid.
// Both widths of column tile (256 where the tiles are 128 rows), and a last column tile a part of one.
TEST(WgmmaGemmScheduleTest, GroupedUnitsCoverEveryGroupsRowsOnce) {
  std::mt19937 rng(7);
  for (const int n : {128, 768, 2880}) {
    for (const int num_groups : {1, 3, 128, 256}) {
      for (const int mean_rows : {1, 8, 100, 700}) {
        std::vector<int32_t> rows = {0};
        for (int g = 0; g < num_groups; ++g) {
          const int r = std::uniform_int_distribution<int>(0, 3)(rng) == 0
                            ? 0
                            : std::uniform_int_distribution<int>(1, 2 * mean_rows)(rng);
          rows.push_back(rows.back() + r);
        }
        const int m = rows.back(), k = 2048;
        const Schedule s = grouped_schedule(m, n, k, num_groups, m, true);
        EXPECT_EQ(s.splits, 1);
        EXPECT_EQ(s.tile_n, s.tile_m == 128 && n > kTileN ? kWideTileN : kTileN);
        EXPECT_EQ(s.n_tiles, (n + s.tile_n - 1) / s.tile_n);
        std::vector<int> cumulative = {0};
        for (int g = 0; g < num_groups; ++g) {
          cumulative.push_back(cumulative.back() + group_m_tiles(rows[g + 1] - rows[g], s.tile_m));
        }
        ASSERT_LE(cumulative.back(), s.m_tiles) << "the bound holds every split of the rows";
        std::vector<int> covered(static_cast<size_t>(m) * s.n_tiles, 0);
        for (int unit = 0; unit < s.units(); ++unit) {
          const UnitTile t = grouped_unit(s, unit, cumulative.data(), num_groups, rows.data());
          if (!t.valid) continue;
          ASSERT_EQ(t.group_row0, rows[t.group]);
          ASSERT_EQ(t.row_end, rows[t.group + 1]);
          ASSERT_GE(t.m0, t.group_row0);
          ASSERT_LT(t.m0, t.row_end);
          ASSERT_EQ((t.m0 - t.group_row0) % s.tile_m, 0);
          ASSERT_EQ(t.first_slice, 0);
          ASSERT_EQ(t.end_slice, s.slices);
          ASSERT_EQ(t.n0 % s.tile_n, 0);
          ASSERT_LT(t.n0, n);
          for (int r = t.m0; r < t.m0 + s.tile_m && r < t.row_end; ++r) ++covered[r * s.n_tiles + t.n0 / s.tile_n];
        }
        for (size_t i = 0; i < covered.size(); ++i) {
          ASSERT_EQ(covered[i], 1) << "row " << i / s.n_tiles << " column tile " << i % s.n_tiles << ", "
                                   << num_groups << " groups of about " << mean_rows << " rows, n " << n;
        }
      }
    }
  }
}

// A grouping sized for the worst case (CUDA graphs: 9,216 rows of x for Qwen3-30B-A3B's 1,024 routed rows at batch
// 128 over 128 experts) takes its tiles' height from the rows the groups really hold, and its bound from all of x.
TEST(WgmmaGemmScheduleTest, GroupedTilesFollowTheRoutedRows) {
  const Schedule decode = grouped_schedule(9216, 1536, 2 * 2048, 128, 1024, true);
  EXPECT_EQ(decode.tile_m, 64);
  EXPECT_EQ(decode.tile_n, kTileN);  // few rows an expert: bound by the weight's bytes, not L2
  EXPECT_EQ(decode.m_tiles, 9216 / 64 + 128);
  EXPECT_EQ(decode.slices, 2 * 2048 / kTileK);  // bf16: 64 values a slice
  const Schedule prefill = grouped_schedule(73728, 1536, 2 * 2048, 128, 65536, true);
  EXPECT_EQ(prefill.tile_m, 128);
  EXPECT_EQ(prefill.tile_n, kWideTileN);
  EXPECT_EQ(prefill.n_tiles, 6);
  EXPECT_EQ(grouped_schedule(73728, 128, 2 * 2048, 128, 65536, true).tile_n, kTileN);  // one tile of 128 is enough
}

}  // namespace
}  // namespace tern::kernels::wgmma_gemm
