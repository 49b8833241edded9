#pragma once
// Which KV blocks each sequence holds: allocation from the block pool (evicting cached prefixes when it runs
// short), prefix matching and caching through the radix tree, and forks that share a prompt's blocks. Works in
// blocks and token ids only; the device memory behind the blocks belongs to the model runner.
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "kvcache/block_pool.h"
#include "kvcache/radix_cache.h"

namespace tern {

// One sequence's block table. blocks[0, num_cached_blocks) are the path of `cached_node` in the prefix cache;
// the rest are the sequence's own (see the invariant in radix_cache.h).
struct SequenceBlocks {
  std::vector<int32_t> blocks;
  RadixNode* cached_node = nullptr;
  int32_t num_cached_blocks = 0;
};

struct PrefixCacheStats {
  int64_t num_queries = 0;
  int64_t num_query_tokens = 0;
  int64_t num_hit_tokens = 0;
  double hit_rate() const { return num_query_tokens ? static_cast<double>(num_hit_tokens) / num_query_tokens : 0.0; }
};

class KvCacheManager {
 public:
  // Only whole blocks within a sequence's first `max_shared_prefix_tokens` tokens are cached and matched (0: no
  // limit), for models whose later cache contents depend on more than the tokens (KvLayerSpec).
  KvCacheManager(int32_t num_blocks, int32_t block_size, bool enable_prefix_cache,
                 int64_t max_shared_prefix_tokens = 0);

  int32_t block_size() const { return block_size_; }
  int32_t num_blocks() const { return pool_.num_blocks(); }
  // Blocks that an allocation can get: free ones plus cached ones that nothing else references.
  int32_t num_available_blocks() const { return pool_.num_free_blocks() + pool_.num_cached_idle_blocks(); }
  int32_t num_free_blocks() const { return pool_.num_free_blocks(); }
  // Fraction of the pool held by sequences (cached-only blocks count as available).
  double usage() const { return 1.0 - static_cast<double>(num_available_blocks()) / num_blocks(); }
  const PrefixCacheStats& prefix_stats() const { return stats_; }
  bool prefix_cache_enabled() const { return radix_ != nullptr; }

  // Gives a sequence that holds no blocks the longest cached prefix of `tokens`, in whole blocks, always leaving
  // at least one token to compute (its logits are needed). Returns the number of cached tokens.
  int32_t match_prefix(SequenceBlocks& seq, std::span<const int32_t> tokens);
  // For KV computed by another engine (prefill/decode disaggregation): makes blocks [first_block, first_block +
  // num_blocks) of `tokens` cached, allocating and inserting into the prefix cache those not cached yet. Returns one
  // entry per block of that range, in order: the block id the caller must fill with the block's KV (before anything
  // else allocates), or -1 when the block was cached already; fewer entries when the pool runs dry. Returns nothing
  // when prefix caching is off or a block before `first_block` is not cached (its KV never arrived or was evicted),
  // so no cached path ever has a hole.
  std::vector<int32_t> import_prefix(std::span<const int32_t> tokens, int32_t first_block, int32_t num_blocks);
  // Counts one admitted request's prefix lookup in the hit statistics (a request that waits and matches again
  // is counted once, when it is admitted).
  void record_prefix_query(int64_t num_query_tokens, int64_t num_hit_tokens);
  // Grows the sequence's block table to cover `num_tokens` tokens, evicting cached blocks if needed. Returns false,
  // changing nothing, when the pool cannot supply them.
  bool allocate(SequenceBlocks& seq, int64_t num_tokens);
  // Offers the sequence's blocks that became full of computed tokens to the prefix cache.
  void cache_blocks(SequenceBlocks& seq, std::span<const int32_t> tokens, int64_t num_computed_tokens);
  // Drops all of the sequence's block references.
  void free(SequenceBlocks& seq);
  // A new sequence sharing the first `num_shared_blocks` blocks of `seq` (each retained once more).
  SequenceBlocks fork(const SequenceBlocks& seq, int32_t num_shared_blocks);

 private:
  int32_t blocks_for(int64_t num_tokens) const {
    return static_cast<int32_t>((num_tokens + block_size_ - 1) / block_size_);
  }

  int32_t block_size_;
  BlockPool pool_;
  int32_t max_shared_blocks_;  // whole blocks of a sequence that the prefix cache may hold and match
  std::unique_ptr<RadixCache> radix_;  // null when prefix caching is off
  PrefixCacheStats stats_;
};

}  // namespace tern
