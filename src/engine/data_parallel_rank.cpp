#include "engine/data_parallel_rank.h"

#include <tuple>

#include "core/error.h"

namespace tern {

int pick_data_parallel_rank(std::span<const RankLoad> ranks) {
  if (ranks.empty()) fail("data-parallel rank: no ranks to pick from");
  const auto preference = [](const RankLoad& r) {
    return std::make_tuple(r.num_cached_tokens, -r.num_running, r.num_available_blocks);
  };
  size_t best = 0;
  for (size_t r = 1; r < ranks.size(); ++r) {
    if (preference(ranks[r]) > preference(ranks[best])) best = r;
  }
  return static_cast<int>(best);
}

}  // namespace tern
