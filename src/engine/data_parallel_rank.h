#pragma once
// Which data-parallel rank a sequence runs on (docs/parallelism.md "Data-parallel attention"): each rank has its
// own KV cache and prefix cache, so a sequence goes where most of its prompt is cached already, else where the
// least work is.
#include <cstdint>
#include <span>

namespace tern {

// One rank as a new sequence would find it.
struct RankLoad {
  int32_t num_cached_tokens = 0;     // the sequence's prompt tokens the rank's prefix cache holds
  int32_t num_running = 0;           // sequences running on the rank
  int32_t num_available_blocks = 0;  // KV blocks an allocation on the rank can get
};

// The index of the rank with the longest cached prefix; among equals the fewest running sequences, then the most
// available blocks, then the lowest index. `ranks` must not be empty.
int pick_data_parallel_rank(std::span<const RankLoad> ranks);

}  // namespace tern
