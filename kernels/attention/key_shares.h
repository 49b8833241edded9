#pragma once
// How the split-KV kernels (decode_attention_mma_kernel.cuh, decode_attention_kernel.cuh, mla_attention_kernel.cuh)
// cut a token's keys into num_splits shares of whole key tiles.
#include "common/host_device.h"

namespace tern::kernels {

struct KeyShare {
  int begin = 0;      // the share's first key
  int end = 0;        // past its last key
  int num_tiles = 0;  // tiles of the share, the last one possibly partial
};

// Share `chunk` of `num_splits` of the keys [first, end), in tiles of TileKeys keys counted from `first`: share c
// takes tiles [c T / S, (c + 1) T / S) of the T tiles, so that no share is more than a tile longer than another.
// (Shares of ceil(T / S) tiles left the last ones short or empty: batch 1 at 32K keys, 33 shares of 16 tiles where
// 32 held every key, 78% of the copy bandwidth against 80%.) With fewer tiles than shares some shares are empty.
template <int TileKeys>
TERN_HOST_DEVICE inline KeyShare key_share(int first, int end, int chunk, int num_splits) {
  const int tiles = end > first ? (end - first + TileKeys - 1) / TileKeys : 0;
  const int first_tile = static_cast<int>(static_cast<long long>(chunk) * tiles / num_splits);
  const int end_tile = static_cast<int>(static_cast<long long>(chunk + 1) * tiles / num_splits);
  KeyShare share;
  share.begin = first + first_tile * TileKeys;
  share.end = first + end_tile * TileKeys < end ? first + end_tile * TileKeys : end;
  share.num_tiles = end_tile - first_tile;
  return share;
}

}  // namespace tern::kernels
