#pragma once
// How the TMA + wgmma GEMMs (wgmma_gemm_kernel.cuh: block FP8 and bf16) share out their work: output tiles of
// tile_m rows of x by tile_n weight rows, each with a range of K slices of 128 bytes (all of them, unless K is split).
// K is counted in bytes of a row here: a slice is 128 e4m3 codes (one scale block) or 64 bf16 values. Plain
// arithmetic, callable from host and device, so that tests/kernels/linear/wgmma_gemm_schedule_test.cpp checks it on
// the CPU.
#include <cstdint>

#include "common/host_device.h"

namespace tern::kernels::wgmma_gemm {

constexpr int kTileN = 128;
// bf16 tiles of 128 rows take 256 weight rows where n is wider than 128 (and, in a plain product, the wider tiles
// still give every SM one): both tiles come out of L2 for every slice, and 128 x 256 moves a quarter less a FLOP
// than 128 x 128 (the bf16 expert GEMMs of a prefill ran at 417 TFLOP/s on 128 x 128 tiles, moving about 6 TB/s
// on an H100). Block-FP8 tiles stay 128 wide: their registers hold a second partial sum instead
// (wgmma_gemm_kernel.cuh).
constexpr int kWideTileN = 256;
constexpr int kTileK = 128;  // bytes of K a slice: one scale block of e4m3 codes
// Consecutive units walk the output tiles of a band of kBandTiles row tiles column tile by column tile, so that
// the blocks running at once share x's and the weight's tiles in L2.
constexpr int kBandTiles = 8;
// Groups a grouped product may have (the kernel keeps their tile counts in shared memory): as many as the MoE
// grouping's experts (kernels/moe/moe_experts.cu).
constexpr int kMaxGroups = 4096;

struct Tile {
  int m0, n0, first_slice, end_slice, split;
};

struct Schedule {
  int tile_m = 64;
  int tile_n = kTileN;
  int m_tiles = 0, n_tiles = 0, slices = 0, splits = 1, slices_per_split = 0;

  TERN_HOST_DEVICE int units() const { return m_tiles * n_tiles * splits; }

  TERN_HOST_DEVICE Tile tile(int unit) const {
    const int tiles = m_tiles * n_tiles;
    const int split = unit / tiles;
    const int t = unit % tiles;
    const int band = t / (kBandTiles * n_tiles);
    const int within = t % (kBandTiles * n_tiles);
    const int band_rows = m_tiles - band * kBandTiles < kBandTiles ? m_tiles - band * kBandTiles : kBandTiles;
    const int m_tile = band * kBandTiles + within % band_rows;
    const int n_tile = within / band_rows;
    const int first_slice = split * slices_per_split;
    const int end_slice = first_slice + slices_per_split < slices ? first_slice + slices_per_split : slices;
    return {m_tile * tile_m, n_tile * tile_n, first_slice, end_slice, split};
  }
};

// Tiles of 64 rows of x for up to 64 rows (one consumer warpgroup), else of 128 (two).
TERN_HOST_DEVICE constexpr int tile_rows(int m) { return m <= 64 ? 64 : 128; }

// Whether tiles of tile_m rows may take kWideTileN weight rows for an n-row weight: where the kernel takes wide
// tiles at all (`wide_tiles`: bf16), 128-row tiles (64-row ones are few rows, bound by the weight's bytes rather
// than by L2) of a weight wider than one 128-row tile.
TERN_HOST_DEVICE constexpr bool wide_tiles_fit(bool wide_tiles, int tile_m, int n) {
  return wide_tiles && tile_m == 128 && n > kTileN;
}

// A unit as the kernel works it: x's rows [m0, row_end) of one group (all of x in a plain product), whose scales
// start at the group's first row group_row0, the output columns from n0 of the group's weight, and K slices.
struct UnitTile {
  bool valid = false;
  int group = 0;
  int group_row0 = 0;
  int m0 = 0, row_end = 0, n0 = 0;
  int first_slice = 0, end_slice = 0, split = 0;
};

TERN_HOST_DEVICE inline UnitTile plain_unit(const Tile& t, int m) {
  return {true, 0, 0, t.m0, m, t.n0, t.first_slice, t.end_slice, t.split};
}

TERN_HOST_DEVICE constexpr int group_m_tiles(int rows, int tile_m) { return (rows + tile_m - 1) / tile_m; }

// Grouped products (MoE experts, fp8_gemm.h and bf16_gemm.h): group g's rows of x are [group_rows[g],
// group_rows[g + 1]), its m tiles cumulative_tiles[g] .. cumulative_tiles[g + 1] - 1 of all groups'
// (cumulative_tiles[0] = 0, group_m_tiles each). Unit u is column tile u % n_tiles of m tile u / n_tiles, with every
// slice: the blocks running at once take every column of a few m tiles, so that each x tile comes from memory once
// and each weight tile once for all of its group's m tiles, where the column-major order (every m tile of a column,
// then the next column) brought x back from memory for each column. The m tiles are counted up to a bound known
// before the groups' rows are (grouped_schedule); units past the groups' tiles are not valid.
TERN_HOST_DEVICE inline UnitTile grouped_unit(const Schedule& s, int unit, const int* cumulative_tiles,
                                              int num_groups, const int32_t* group_rows) {
  UnitTile t;
  const int m_tile = unit / s.n_tiles;
  if (m_tile >= cumulative_tiles[num_groups]) return t;
  int lo = 0, hi = num_groups;  // cumulative_tiles[lo] <= m_tile < cumulative_tiles[hi]
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (cumulative_tiles[mid] <= m_tile) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  t.valid = true;
  t.group = lo;
  t.group_row0 = group_rows[lo];
  t.m0 = group_rows[lo] + (m_tile - cumulative_tiles[lo]) * s.tile_m;
  t.row_end = group_rows[lo + 1];
  t.n0 = unit % s.n_tiles * s.tile_n;
  t.first_slice = 0;
  t.end_slice = s.slices;
  return t;
}

// The schedule of a grouped product of m rows (k_bytes a row) in num_groups groups: tiles by the mean of a group's
// `tile_basis_rows` (m, or fewer where x is sized for the worst case and the groups hold fewer real rows), and as
// many m tiles as any split of the m rows into the groups can take (ceil(m / tile_m) + num_groups), never split-K.
TERN_HOST_DEVICE inline Schedule grouped_schedule(int m, int n, int k_bytes, int num_groups, int tile_basis_rows,
                                                  bool wide_tiles) {
  Schedule s;
  s.tile_m = tile_rows(num_groups > 0 ? tile_basis_rows / num_groups : tile_basis_rows);
  if (wide_tiles_fit(wide_tiles, s.tile_m, n)) s.tile_n = kWideTileN;
  s.m_tiles = group_m_tiles(m, s.tile_m) + num_groups;
  s.n_tiles = (n + s.tile_n - 1) / s.tile_n;
  s.slices = (k_bytes + kTileK - 1) / kTileK;
  s.slices_per_split = s.slices;
  return s;
}

// The schedule of an [m, k] x [n, k]^T product (k_bytes a row) on `sms` SMs. With `may_split`, where the tiles
// alone would leave SMs idle, K is cut into ranges so that every SM gets a unit (never an empty range).
TERN_HOST_DEVICE inline Schedule make_schedule(int m, int n, int k_bytes, int sms, bool may_split, bool wide_tiles) {
  Schedule s;
  s.tile_m = tile_rows(m);
  s.m_tiles = (m + s.tile_m - 1) / s.tile_m;
  if (wide_tiles_fit(wide_tiles, s.tile_m, n) && s.m_tiles * ((n + kWideTileN - 1) / kWideTileN) >= sms) {
    s.tile_n = kWideTileN;
  }
  s.n_tiles = (n + s.tile_n - 1) / s.tile_n;
  s.slices = (k_bytes + kTileK - 1) / kTileK;
  const int tiles = s.m_tiles * s.n_tiles;
  int wanted = 1;
  if (may_split && tiles < sms) wanted = sms / tiles < s.slices ? sms / tiles : s.slices;
  s.slices_per_split = (s.slices + wanted - 1) / wanted;
  s.splits = (s.slices + s.slices_per_split - 1) / s.slices_per_split;
  return s;
}

}  // namespace tern::kernels::wgmma_gemm
