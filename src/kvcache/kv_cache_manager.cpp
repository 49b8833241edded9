#include "kvcache/kv_cache_manager.h"

#include <algorithm>
#include <limits>

#include "core/error.h"

namespace tern {

namespace {

// Where a looked-up block is when it is not on the device (PrefixLookup::where).
constexpr int32_t kOnHost = -2;
constexpr int32_t kOnDisk = -3;

}  // namespace

KvCacheManager::KvCacheManager(int32_t num_blocks, int32_t block_size, bool enable_prefix_cache,
                               int64_t max_shared_prefix_tokens, std::vector<int64_t> group_sliding_windows,
                               KvTierConfig tiers)
    : block_size_(block_size), pool_(num_blocks), group_sliding_windows_(std::move(group_sliding_windows)) {
  if (block_size <= 0) fail("kv cache manager: block size must be positive, got {}", block_size);
  if (max_shared_prefix_tokens < 0) fail("kv cache manager: shared prefix limit {} is negative", max_shared_prefix_tokens);
  if (group_sliding_windows_.empty()) fail("kv cache manager: needs at least one KV cache group");
  std::vector<bool> group_is_sliding;
  for (int64_t window : group_sliding_windows_) {
    if (window < 0) fail("kv cache manager: sliding window {} is negative", window);
    group_is_sliding.push_back(window > 0);
  }
  max_shared_blocks_ = max_shared_prefix_tokens > 0
                           ? static_cast<int32_t>(std::min<int64_t>(max_shared_prefix_tokens / block_size, num_blocks))
                           : std::numeric_limits<int32_t>::max();
  if (tiers.num_host_blocks < 0) fail("kv cache manager: {} host blocks", tiers.num_host_blocks);
  if (tiers.disk && tiers.num_host_blocks == 0) fail("kv cache manager: a disk tier needs a host tier above it");
  if (max_shared_blocks_ == 0) enable_prefix_cache = false;
  if (!enable_prefix_cache) return;
  if (tiers.num_host_blocks > 0) {
    host_pool_ = std::make_unique<BlockPool>(tiers.num_host_blocks);
    write_through_ = tiers.write_through;
    tier_stats_.num_host_blocks = tiers.num_host_blocks;
  }
  radix_ = std::make_unique<RadixCache>(pool_, block_size, std::move(group_is_sliding), host_pool_.get(),
                                        host_pool_ ? tiers.disk : nullptr);
}

int32_t KvCacheManager::first_read_block(int32_t group, int64_t position) const {
  const int64_t window = group_sliding_windows_[group];
  if (window == 0) return 0;
  return static_cast<int32_t>(std::max<int64_t>(0, position - window + 1) / block_size_);
}

int64_t kv_blocks_held(std::span<const int64_t> group_sliding_windows, int64_t block_size, int64_t num_tokens) {
  const int64_t all_blocks = (num_tokens + block_size - 1) / block_size;
  int64_t total = 0;
  for (int64_t window : group_sliding_windows) {
    // A query reads `window` tokens, which span at most ceil((window - 1) / block_size) + 1 blocks.
    const int64_t window_blocks = (window - 1 + block_size - 1) / block_size + 1;
    total += window == 0 ? all_blocks : std::min(all_blocks, window_blocks);
  }
  return total;
}

int64_t KvCacheManager::max_tokens_held(int64_t num_computed_tokens) const {
  // Every group's table covers the same blocks; a sliding group holds those from its first read block on.
  int64_t blocks_dropped = 0;
  for (int32_t g = 0; g < num_groups(); ++g) blocks_dropped += first_read_block(g, num_computed_tokens);
  return (num_blocks() + blocks_dropped) / num_groups() * block_size_;
}

int32_t KvCacheManager::longest_readable_prefix(const std::vector<std::vector<int32_t>>& tables,
                                                int32_t max_blocks) const {
  // held_run[g][b]: how many blocks of group g end at b with none dropped.
  std::vector<std::vector<int32_t>> held_run(tables.size());
  for (size_t g = 0; g < tables.size(); ++g) {
    int32_t run = 0;
    for (int32_t b = 0; b < max_blocks; ++b) {
      run = tables[g][b] == kNoBlock ? 0 : run + 1;
      held_run[g].push_back(run);
    }
  }
  for (int32_t end = max_blocks; end > 0; --end) {
    bool readable = true;
    for (int32_t g = 0; g < num_groups() && readable; ++g) {
      const int32_t needed = end - first_read_block(g, static_cast<int64_t>(end) * block_size_);
      readable = held_run[g][end - 1] >= needed;
    }
    if (readable) return end;
  }
  return 0;
}

std::vector<std::vector<int32_t>> KvCacheManager::retain_readable(const std::vector<std::vector<int32_t>>& tables,
                                                                  int32_t num_blocks) {
  std::vector<std::vector<int32_t>> kept(num_groups());
  for (int32_t g = 0; g < num_groups(); ++g) {
    const int32_t first = first_read_block(g, static_cast<int64_t>(num_blocks) * block_size_);
    for (int32_t b = 0; b < num_blocks; ++b) {
      const int32_t block = b >= first ? tables[g][b] : kNoBlock;
      if (block != kNoBlock) pool_.retain(block);
      kept[g].push_back(block);
    }
  }
  return kept;
}

void KvCacheManager::hang_from(SequenceBlocks& seq, RadixNode* node) {
  RadixNode* previous = seq.cached_node;
  seq.cached_node = node;
  if (node) ++node->num_sequences;
  if (previous) {
    --previous->num_sequences;
    radix_->prune(previous);
  }
}

KvCacheManager::PrefixLookup KvCacheManager::look_up_prefix(std::span<const int32_t> tokens) {
  PrefixLookup lookup;
  lookup.where.resize(num_groups());
  if (!radix_ || tokens.empty()) return lookup;
  // The last token is always recomputed: the step that computes it yields the logits to sample from.
  const int32_t max_blocks = std::min(static_cast<int32_t>((tokens.size() - 1) / block_size_), max_shared_blocks_);
  lookup.path = radix_->match(tokens, max_blocks);
  for (const RadixNode* node : lookup.path) {
    for (int32_t g = 0; g < num_groups(); ++g) {
      int32_t where = node->blocks[g];
      if (where == kNoBlock && node->host_blocks[g] != kNoBlock) where = kOnHost;
      if (where == kNoBlock && radix_->holds(*node, g)) where = kOnDisk;
      lookup.where[g].push_back(where);
    }
  }
  // The disk tier may hold the prefix beyond the tree (evicted from the host, or written before a restart).
  if (KvDiskTier* disk = radix_->disk_tier()) {
    std::vector<KvBlockKey> keys = lookup.path.empty() ? radix_->root()->keys : lookup.path.back()->keys;
    for (auto b = static_cast<int32_t>(lookup.path.size()); b < max_blocks; ++b) {
      const auto block_tokens = tokens.subspan(static_cast<size_t>(b) * block_size_, block_size_);
      bool any = false;
      for (int32_t g = 0; g < num_groups(); ++g) {
        keys[g] = chain_block_key(keys[g], g, block_tokens);
        const bool held = disk->contains(keys[g]);
        lookup.where[g].push_back(held ? kOnDisk : kNoBlock);
        any = any || held;
      }
      if (!any) {
        for (auto& where : lookup.where) where.pop_back();
        break;
      }
    }
  }
  lookup.num_hit_blocks = longest_readable_prefix(lookup.where, static_cast<int32_t>(lookup.where[0].size()));
  return lookup;
}

std::optional<int32_t> KvCacheManager::allocate_device_block() {
  if (pool_.num_free_blocks() == 0) radix_->evict(1);
  return pool_.allocate();
}

std::optional<int32_t> KvCacheManager::allocate_host_block() {
  if (host_pool_->num_free_blocks() == 0) radix_->evict_host(1);
  return host_pool_->allocate();
}

int32_t KvCacheManager::bring_to_device(PrefixLookup& lookup, std::span<const int32_t> tokens,
                                        std::vector<std::vector<int32_t>>& device) {
  // The path's nodes count as hung from while this runs, so that the evictions it causes remove none of them (a
  // node whose data is only on disk lives by its children's blocks, which eviction may take).
  struct PathLock {
    std::vector<RadixNode*>& path;
    RadixCache& radix;
    explicit PathLock(std::vector<RadixNode*>& p, RadixCache& r) : path(p), radix(r) {
      for (RadixNode* node : path) ++node->num_sequences;
    }
    ~PathLock() {
      for (RadixNode* node : path) --node->num_sequences;
      if (!path.empty()) radix.prune(path.back());
    }
  } lock(lookup.path, *radix_);
  const int32_t num_hit = lookup.num_hit_blocks;
  device.assign(num_groups(), std::vector<int32_t>(num_hit, kNoBlock));
  const auto needed = [&](int32_t g, int32_t b) {
    return b >= first_read_block(g, static_cast<int64_t>(num_hit) * block_size_) && lookup.where[g][b] != kNoBlock;
  };
  // Held first, so that making room for the others evicts none of them.
  for (int32_t b = 0; b < num_hit; ++b) {
    for (int32_t g = 0; g < num_groups(); ++g) {
      if (!needed(g, b)) continue;
      if (lookup.where[g][b] >= 0) {
        pool_.retain(lookup.where[g][b]);
        device[g][b] = lookup.where[g][b];
      } else if (lookup.where[g][b] == kOnHost) {
        radix_->pin_host_block(lookup.path[b]->host_blocks[g]);
      }
    }
  }
  // First the disk reads, which get the host pool's room before the write-backs of the device blocks the loads
  // evict (a hit is worth more than a least recently used block); room is made for all of them in one pass over
  // the tree per tier, not one per block.
  int32_t num_disk_reads = 0;
  int32_t num_loads = 0;
  for (int32_t b = 0; b < num_hit; ++b) {
    for (int32_t g = 0; g < num_groups(); ++g) {
      if (!needed(g, b) || lookup.where[g][b] >= 0) continue;
      ++num_loads;
      if (lookup.where[g][b] == kOnDisk) ++num_disk_reads;
    }
  }
  int32_t num_read = num_hit;  // blocks [0, num_read) have every needed block on the device or the host
  if (num_disk_reads > 0) {
    if (num_disk_reads > host_pool_->num_free_blocks()) radix_->evict_host(num_disk_reads - host_pool_->num_free_blocks());
    for (int32_t b = 0; b < num_hit && num_read == num_hit; ++b) {
      if (b == static_cast<int32_t>(lookup.path.size())) {
        RadixNode* parent = b == 0 ? radix_->root() : lookup.path.back();
        RadixNode* node = radix_->child(parent, tokens.subspan(static_cast<size_t>(b) * block_size_, block_size_));
        if (!node) {
          num_read = b;
          break;
        }
        lookup.path.push_back(node);
        ++node->num_sequences;
      }
      RadixNode& node = *lookup.path[b];
      for (int32_t g = 0; g < num_groups(); ++g) {
        if (!needed(g, b) || lookup.where[g][b] != kOnDisk) continue;
        const std::optional<int32_t> host_block = allocate_host_block();
        if (!host_block) {
          num_read = b;
          break;
        }
        if (!radix_->disk_tier()->load(node.keys[g], node.parent->keys[g], g, node.tokens, *host_block)) {
          host_pool_->release(*host_block);
          num_read = b;
          break;
        }
        radix_->adopt_host_block(node, g, *host_block);
      }
    }
  }
  if (num_loads > pool_.num_free_blocks()) radix_->evict(num_loads - pool_.num_free_blocks());
  for (int32_t b = 0; b < num_read; ++b) {
    RadixNode& node = *lookup.path[b];
    for (int32_t g = 0; g < num_groups(); ++g) {
      if (!needed(g, b) || device[g][b] != kNoBlock) continue;
      const std::optional<int32_t> block = allocate_device_block();
      if (!block) return b;
      radix_->load(node, g, *block);
      device[g][b] = *block;
    }
  }
  return num_read;
}

int32_t KvCacheManager::match_prefix(SequenceBlocks& seq, std::span<const int32_t> tokens) {
  if (seq.num_blocks() != 0) fail("kv cache manager: prefix match for a sequence that already holds blocks");
  last_host_hit_tokens_ = last_disk_hit_tokens_ = 0;
  if (!radix_ || tokens.empty()) return 0;
  PrefixLookup lookup = look_up_prefix(tokens);
  std::vector<std::vector<int32_t>> device;
  const int32_t num_brought = bring_to_device(lookup, tokens, device);
  // A hit shorter than the path where a sliding-window group dropped blocks the next query reads (or the pool had
  // no room to load them): the tokens after it are recomputed (SGLang's bounded replay of the last window).
  const int32_t num_hit = num_brought == lookup.num_hit_blocks ? num_brought
                                                                : longest_readable_prefix(device, num_brought);
  seq.tables = retain_readable(device, num_hit);
  for (auto& table : device) {
    for (int32_t block : table) {
      if (block != kNoBlock) pool_.release(block);
    }
  }
  for (int32_t b = 0; b < num_hit; ++b) {
    bool from_host = false;
    bool from_disk = false;
    for (int32_t g = 0; g < num_groups(); ++g) {
      from_host = from_host || lookup.where[g][b] == kOnHost;
      from_disk = from_disk || lookup.where[g][b] == kOnDisk;
    }
    if (from_disk) {
      last_disk_hit_tokens_ += block_size_;
    } else if (from_host) {
      last_host_hit_tokens_ += block_size_;
    }
  }
  hang_from(seq, num_hit > 0 ? lookup.path[num_hit - 1] : radix_->root());
  seq.num_cached_blocks = num_hit;
  return num_hit * block_size_;
}

int32_t KvCacheManager::cached_prefix_tokens(std::span<const int32_t> tokens) {
  return look_up_prefix(tokens).num_hit_blocks * block_size_;
}

std::vector<KvTierCopy> KvCacheManager::take_tier_copies() {
  if (!host_pool_) return {};
  std::vector<KvTierCopy> copies = radix_->take_copies();
  for (const KvTierCopy& copy : copies) {
    ++(copy.direction == KvTierCopy::Direction::kToHost ? tier_stats_.num_blocks_to_host
                                                         : tier_stats_.num_blocks_to_device);
  }
  tier_stats_.num_host_blocks_cached = host_pool_->num_blocks() - host_pool_->num_free_blocks();
  return copies;
}

std::vector<int32_t> KvCacheManager::import_prefix(std::span<const int32_t> tokens, int32_t first_block,
                                                   int32_t num_blocks) {
  if (num_groups() != 1 || group_sliding_windows_[0] != 0) {
    fail("kv cache manager: KV import needs a model whose layers all keep every block; this one has {} KV cache "
         "groups, sliding window {}", num_groups(), group_sliding_windows_.back());
  }
  if (first_block < 0 || num_blocks < 0) fail("kv cache manager: import of blocks [{}, +{})", first_block, num_blocks);
  if (static_cast<int64_t>(tokens.size()) < static_cast<int64_t>(first_block + num_blocks) * block_size_) {
    fail("kv cache manager: import of {} blocks from block {} but only {} tokens", num_blocks, first_block,
         tokens.size());
  }
  if (!radix_) return {};
  const int32_t end = std::min(first_block + num_blocks, max_shared_blocks_);
  // Held while allocating, so that eviction cannot take back a block matched or inserted here.
  SequenceBlocks held;
  held.tables.resize(1);
  std::vector<RadixNode*> path = radix_->match(tokens, end);
  // A node whose block is only in a lower tier gets the imported one (insert fills the empty device slot).
  const auto first_off_device =
      std::find_if(path.begin(), path.end(), [](const RadixNode* node) { return node->blocks[0] == kNoBlock; });
  path.erase(first_off_device, path.end());
  for (const RadixNode* matched : path) {
    pool_.retain(matched->blocks[0]);
    held.tables[0].push_back(matched->blocks[0]);
  }
  RadixNode* node = path.empty() ? radix_->root() : path.back();
  const auto num_matched = static_cast<int32_t>(path.size());
  std::vector<int32_t> to_fill;
  if (num_matched >= first_block) {
    for (int32_t b = first_block; b < end; ++b) {
      if (b < num_matched) {
        to_fill.push_back(-1);
        continue;
      }
      if (pool_.num_free_blocks() == 0 && radix_->evict(1) == 0) break;
      const auto block = pool_.allocate();
      if (!block) break;
      int32_t blocks[] = {*block};
      RadixNode* inserted = radix_->insert(node, tokens.subspan(static_cast<size_t>(b) * block_size_, block_size_), blocks);
      if (!inserted) {
        pool_.release(*block);
        break;
      }
      held.tables[0].push_back(*block);
      node = inserted;
      to_fill.push_back(*block);
    }
  }
  free(held);
  return to_fill;
}

void KvCacheManager::record_prefix_query(int64_t num_query_tokens, int64_t num_hit_tokens) {
  ++stats_.num_queries;
  stats_.num_query_tokens += num_query_tokens;
  stats_.num_hit_tokens += num_hit_tokens;
  stats_.num_host_hit_tokens += last_host_hit_tokens_;
  stats_.num_disk_hit_tokens += last_disk_hit_tokens_;
  last_host_hit_tokens_ = last_disk_hit_tokens_ = 0;
}

bool KvCacheManager::allocate(SequenceBlocks& seq, int64_t num_computed_tokens, int64_t num_tokens) {
  if (seq.tables.empty()) seq.tables.resize(num_groups());
  for (int32_t g = 0; g < num_groups(); ++g) {
    const int32_t first = std::min(first_read_block(g, num_computed_tokens), seq.num_blocks());
    for (int32_t b = 0; b < first; ++b) {
      int32_t& block = seq.tables[g][b];
      if (block == kNoBlock) continue;
      pool_.release(block);
      block = kNoBlock;
    }
  }
  const int32_t new_per_group = blocks_for(num_tokens) - seq.num_blocks();
  if (new_per_group <= 0) return true;
  const int32_t needed = new_per_group * num_groups();
  if (needed > num_available_blocks()) return false;
  if (needed > pool_.num_free_blocks()) radix_->evict(needed - pool_.num_free_blocks());
  for (auto& table : seq.tables) {
    for (int32_t i = 0; i < new_per_group; ++i) {
      const auto block = pool_.allocate();
      if (!block) fail("kv cache manager: pool ran dry after eviction promised {} blocks", needed);
      table.push_back(*block);
    }
  }
  return true;
}

void KvCacheManager::truncate(SequenceBlocks& seq, int64_t num_tokens) {
  const int32_t keep = std::max(blocks_for(num_tokens), seq.num_cached_blocks);
  for (auto& table : seq.tables) {
    // Last block first, as free() does.
    while (static_cast<int32_t>(table.size()) > keep) {
      if (table.back() != kNoBlock) pool_.release(table.back());
      table.pop_back();
    }
  }
}

void KvCacheManager::cache_blocks(SequenceBlocks& seq, std::span<const int32_t> tokens, int64_t num_computed_tokens) {
  if (!radix_) return;
  if (!seq.cached_node) hang_from(seq, radix_->root());
  const int64_t num_full =
      std::min<int64_t>({num_computed_tokens / block_size_, static_cast<int64_t>(seq.num_blocks()), max_shared_blocks_});
  std::vector<int32_t> blocks(num_groups());
  while (seq.num_cached_blocks < num_full) {
    const int32_t b = seq.num_cached_blocks;
    for (int32_t g = 0; g < num_groups(); ++g) blocks[g] = seq.tables[g][b];
    const auto block_tokens = tokens.subspan(static_cast<size_t>(b) * block_size_, block_size_);
    RadixNode* inserted = radix_->insert(seq.cached_node, block_tokens, blocks);
    if (!inserted) return;
    for (int32_t g = 0; g < num_groups(); ++g) {
      if (blocks[g] == seq.tables[g][b]) continue;
      // Another sequence cached the same tokens first: use its block so the table stays one cached path.
      pool_.release(seq.tables[g][b]);
      seq.tables[g][b] = blocks[g];
    }
    if (write_through_) {
      for (int32_t g = 0; g < num_groups(); ++g) radix_->offload(*inserted, g);
    }
    hang_from(seq, inserted);
    ++seq.num_cached_blocks;
  }
}

void KvCacheManager::free(SequenceBlocks& seq) {
  // Released last block first so the free stack hands out the prompt's blocks in their original order again.
  for (auto table = seq.tables.rbegin(); table != seq.tables.rend(); ++table) {
    for (auto it = table->rbegin(); it != table->rend(); ++it) {
      if (*it != kNoBlock) pool_.release(*it);
    }
  }
  if (seq.cached_node) hang_from(seq, nullptr);
  seq = SequenceBlocks{};
}

SequenceBlocks KvCacheManager::fork(const SequenceBlocks& seq, int32_t max_shared_blocks) {
  if (max_shared_blocks > seq.num_blocks()) {
    fail("kv cache manager: fork of {} blocks from a sequence holding {}", max_shared_blocks, seq.num_blocks());
  }
  const int32_t num_shared = longest_readable_prefix(seq.tables, max_shared_blocks);
  SequenceBlocks child;
  child.tables = retain_readable(seq.tables, num_shared);
  child.num_cached_blocks = std::min(num_shared, seq.num_cached_blocks);
  RadixNode* node = seq.cached_node;
  for (int32_t up = seq.num_cached_blocks; node && up > child.num_cached_blocks; --up) node = node->parent;
  if (node) hang_from(child, node);
  return child;
}

}  // namespace tern
