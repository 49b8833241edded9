#pragma once
// Which KV blocks each sequence holds, one table per KV cache group: allocation from the block pool (evicting cached
// prefixes when it runs short), dropping sliding-window blocks no query reads any more, prefix matching and caching
// through the radix tree, and forks that share a prompt's blocks. Works in blocks and token ids only; the device
// memory behind the blocks belongs to the model runner.
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "kvcache/block_pool.h"
#include "kvcache/kv_disk_tier.h"
#include "kvcache/kv_tier_copy.h"
#include "kvcache/radix_cache.h"

namespace tern {

// One sequence's block tables, one per KV cache group, all of equal length. Blocks [0, num_cached_blocks) of each
// table are those of the path of `cached_node` in the prefix cache (kNoBlock where a sliding-window group dropped
// them); the rest are the sequence's own (see the invariants in radix_cache.h).
struct SequenceBlocks {
  std::vector<std::vector<int32_t>> tables;  // [group][block]; empty while the sequence holds no blocks
  RadixNode* cached_node = nullptr;
  int32_t num_cached_blocks = 0;

  int32_t num_blocks() const { return tables.empty() ? 0 : static_cast<int32_t>(tables[0].size()); }
};

struct PrefixCacheStats {
  int64_t num_queries = 0;
  int64_t num_query_tokens = 0;
  int64_t num_hit_tokens = 0;
  // Of num_hit_tokens, those whose blocks came back from the host tier and from the disk tier.
  int64_t num_host_hit_tokens = 0;
  int64_t num_disk_hit_tokens = 0;
  double hit_rate() const { return num_query_tokens ? static_cast<double>(num_hit_tokens) / num_query_tokens : 0.0; }
};

// The tiers below the device pool (SGLang's HiCache, vLLM's KV offloading).
struct KvTierConfig {
  int32_t num_host_blocks = 0;  // the host pool's blocks; 0: no host tier
  // Copy each block to the host when the prefix cache takes it (write_through) rather than when the device evicts
  // it (write-back, the default).
  bool write_through = false;
  KvDiskTier* disk = nullptr;  // the tier below the host pool (null: none)
};

// What moved between the tiers so far, in blocks.
struct KvTierStats {
  int32_t num_host_blocks = 0;
  int32_t num_host_blocks_cached = 0;  // holding a cached prefix
  int64_t num_blocks_to_host = 0;
  int64_t num_blocks_to_device = 0;
};

// The most blocks a sequence of `num_tokens` tokens holds over KV cache groups of these sliding windows (0: a
// keep-all group) in a step that computes one of them: every block of a keep-all group, the blocks one window of a
// sliding-window group spans.
int64_t kv_blocks_held(std::span<const int64_t> group_sliding_windows, int64_t block_size, int64_t num_tokens);

class KvCacheManager {
 public:
  // Only whole blocks within a sequence's first `max_shared_prefix_tokens` tokens are cached and matched (0: no
  // limit), for models whose later cache contents depend on more than the tokens (KvLayerSpec).
  // `group_sliding_windows`: one entry per KV cache group (KvCacheGroup), 0 for a group whose layers read every
  // token, else the group's window: its blocks that no later query reads are dropped from the sequence's table.
  // Every group's blocks come from the one pool.
  // `tiers`: a host tier (and a disk tier below it) under the prefix cache; needs prefix caching.
  KvCacheManager(int32_t num_blocks, int32_t block_size, bool enable_prefix_cache,
                 int64_t max_shared_prefix_tokens = 0, std::vector<int64_t> group_sliding_windows = {0},
                 KvTierConfig tiers = {});

  int32_t block_size() const { return block_size_; }
  int32_t num_blocks() const { return pool_.num_blocks(); }
  int32_t num_groups() const { return static_cast<int32_t>(group_sliding_windows_.size()); }
  // Blocks that an allocation can get: free ones plus cached ones that nothing else references.
  int32_t num_available_blocks() const { return pool_.num_free_blocks() + pool_.num_cached_idle_blocks(); }
  int32_t num_free_blocks() const { return pool_.num_free_blocks(); }
  // Fraction of the pool held by sequences (cached-only blocks count as available).
  double usage() const { return 1.0 - static_cast<double>(num_available_blocks()) / num_blocks(); }
  const PrefixCacheStats& prefix_stats() const { return stats_; }
  bool prefix_cache_enabled() const { return radix_ != nullptr; }
  // The most blocks a sequence of `num_tokens` tokens holds over all groups in a step that computes one of them:
  // every block of a keep-all group, the blocks of one window of a sliding-window group. A sequence within the pool
  // by this bound can always be (re)computed, one token a step at worst.
  int32_t max_blocks_held(int64_t num_tokens) const {
    return static_cast<int32_t>(kv_blocks_held(group_sliding_windows_, block_size_, num_tokens));
  }
  // The most tokens a sequence can cover in a step that computes from `num_computed_tokens` on, with the whole pool
  // to itself: a sliding-window group holds its earlier blocks only while a chunk's queries read them, so a long
  // recomputation after preemption may have to proceed in shorter chunks.
  int64_t max_tokens_held(int64_t num_computed_tokens) const;

  // Gives a sequence that holds no blocks the longest cached prefix of `tokens`, in whole blocks, always leaving
  // at least one token to compute (its logits are needed). A prefix counts only where every keep-all group has
  // all of its blocks and every sliding-window group those of its window before the prefix's end; the tokens after
  // it are recomputed. Blocks of the prefix in the host or disk tier are loaded into device blocks (disk reads now,
  // copies to the device by take_tier_copies), as far as the pool has room. Returns the number of cached tokens.
  int32_t match_prefix(SequenceBlocks& seq, std::span<const int32_t> tokens);
  // The tokens match_prefix would find in any tier, without loading anything.
  int32_t cached_prefix_tokens(std::span<const int32_t> tokens);
  // The copies between the device pool and the host tier decided since the last call, which must run, in order,
  // before the next step's compute (KvTierCopy).
  std::vector<KvTierCopy> take_tier_copies();
  const KvTierStats& tier_stats() const { return tier_stats_; }
  // Host blocks free or held by the prefix cache alone (none is pinned between plans); 0 without a host tier.
  int32_t num_available_host_blocks() const {
    return host_pool_ ? host_pool_->num_free_blocks() + host_pool_->num_cached_idle_blocks() : 0;
  }
  // For KV computed by another engine (prefill/decode disaggregation), in a model of one KV cache group: makes
  // blocks [first_block, first_block + num_blocks) of `tokens` cached, allocating and inserting into the prefix
  // cache those not cached yet. Returns one entry per block of that range, in order: the block id the caller must
  // fill with the block's KV (before anything else allocates), or -1 when the block was cached already; fewer
  // entries when the pool runs dry. Returns nothing when prefix caching is off or a block before `first_block` is
  // not cached (its KV never arrived or was evicted), so no cached path ever has a hole.
  std::vector<int32_t> import_prefix(std::span<const int32_t> tokens, int32_t first_block, int32_t num_blocks);
  // Counts one admitted request's prefix lookup in the hit statistics (a request that waits and matches again
  // is counted once, when it is admitted), with the tiers of the last match_prefix's hit.
  void record_prefix_query(int64_t num_query_tokens, int64_t num_hit_tokens);
  // For a step that computes the sequence's tokens [num_computed_tokens, num_tokens): first drops the blocks of
  // sliding-window groups that no query from `num_computed_tokens` on reads (to the pool, or to the prefix cache's
  // evictable blocks where it holds them too), then grows every table to cover `num_tokens` tokens, evicting cached
  // blocks if needed. Returns false when the pool cannot supply them, having allocated nothing.
  bool allocate(SequenceBlocks& seq, int64_t num_computed_tokens, int64_t num_tokens);
  // Gives back the blocks past those that `num_tokens` tokens need (speculative decoding: the slots of rejected
  // drafts), never a block the prefix cache holds for the sequence.
  void truncate(SequenceBlocks& seq, int64_t num_tokens);
  // Offers the sequence's blocks that became full of computed tokens to the prefix cache.
  void cache_blocks(SequenceBlocks& seq, std::span<const int32_t> tokens, int64_t num_computed_tokens);
  // Drops all of the sequence's block references.
  void free(SequenceBlocks& seq);
  // A new sequence sharing the first blocks of `seq`, at most `max_shared_blocks` of them (each retained once
  // more): fewer where a sliding-window group of `seq` no longer holds the window before that point. The new
  // sequence's computed tokens are its num_blocks() * block_size().
  SequenceBlocks fork(const SequenceBlocks& seq, int32_t max_shared_blocks);

 private:
  int32_t blocks_for(int64_t num_tokens) const {
    return static_cast<int32_t>((num_tokens + block_size_ - 1) / block_size_);
  }
  // The first block of group `group` that a query at `position` or later reads.
  int32_t first_read_block(int32_t group, int64_t position) const;
  // The largest n <= max_blocks for which `tables` hold every block that queries from n * block_size on read
  // (all blocks of a keep-all group, those of the window before n of a sliding-window one).
  int32_t longest_readable_prefix(const std::vector<std::vector<int32_t>>& tables, int32_t max_blocks) const;
  // Blocks [0, num_blocks) of `tables` that queries from num_blocks * block_size on read, retained for another
  // holder; kNoBlock for those a sliding-window group does not read (a prefix hit's or a fork's tables).
  std::vector<std::vector<int32_t>> retain_readable(const std::vector<std::vector<int32_t>>& tables,
                                                    int32_t num_blocks);
  // Makes `node` the end of the sequence's cached path (null: none), keeping the nodes' sequence counts.
  void hang_from(SequenceBlocks& seq, RadixNode* node);
  // The cached prefix of `tokens` in every tier (see match_prefix): the radix tree's nodes along it and, per group
  // and block, the device block or where else the block is (kOnHost, kOnDisk, kNoBlock).
  struct PrefixLookup {
    std::vector<RadixNode*> path;
    std::vector<std::vector<int32_t>> where;  // [group][block]
    int32_t num_hit_blocks = 0;
  };
  PrefixLookup look_up_prefix(std::span<const int32_t> tokens);
  // Brings the looked-up hit's blocks that queries after it read into device blocks, each referenced once for the
  // caller in `device` ([group][block], kNoBlock where not brought); returns how many leading blocks made it (fewer
  // when the pool ran dry or a disk record failed its check).
  int32_t bring_to_device(PrefixLookup& lookup, std::span<const int32_t> tokens,
                          std::vector<std::vector<int32_t>>& device);
  std::optional<int32_t> allocate_device_block();
  std::optional<int32_t> allocate_host_block();

  int32_t block_size_;
  BlockPool pool_;
  std::vector<int64_t> group_sliding_windows_;
  int32_t max_shared_blocks_;  // whole blocks of a sequence that the prefix cache may hold and match
  std::unique_ptr<BlockPool> host_pool_;  // null without a host tier
  bool write_through_ = false;
  std::unique_ptr<RadixCache> radix_;  // null when prefix caching is off
  PrefixCacheStats stats_;
  KvTierStats tier_stats_;
  // The tiers of the last match_prefix's hit, in tokens, counted by record_prefix_query.
  int64_t last_host_hit_tokens_ = 0;
  int64_t last_disk_hit_tokens_ = 0;
};

}  // namespace tern
