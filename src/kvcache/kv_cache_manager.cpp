#include "kvcache/kv_cache_manager.h"

#include <algorithm>
#include <limits>

#include "core/error.h"

namespace tern {

KvCacheManager::KvCacheManager(int32_t num_blocks, int32_t block_size, bool enable_prefix_cache,
                               int64_t max_shared_prefix_tokens)
    : block_size_(block_size), pool_(num_blocks) {
  if (block_size <= 0) fail("kv cache manager: block size must be positive, got {}", block_size);
  if (max_shared_prefix_tokens < 0) fail("kv cache manager: shared prefix limit {} is negative", max_shared_prefix_tokens);
  max_shared_blocks_ = max_shared_prefix_tokens > 0
                           ? static_cast<int32_t>(std::min<int64_t>(max_shared_prefix_tokens / block_size, num_blocks))
                           : std::numeric_limits<int32_t>::max();
  if (max_shared_blocks_ == 0) enable_prefix_cache = false;
  if (enable_prefix_cache) radix_ = std::make_unique<RadixCache>(pool_, block_size);
}

int32_t KvCacheManager::match_prefix(SequenceBlocks& seq, std::span<const int32_t> tokens) {
  if (!seq.blocks.empty()) fail("kv cache manager: prefix match for a sequence that already holds blocks");
  if (!radix_ || tokens.empty()) return 0;
  // The last token is always recomputed: the step that computes it yields the logits to sample from.
  const int32_t max_blocks = std::min(static_cast<int32_t>((tokens.size() - 1) / block_size_), max_shared_blocks_);
  auto match = radix_->match(tokens, max_blocks);
  seq.blocks = std::move(match.blocks);
  seq.cached_node = match.node;
  seq.num_cached_blocks = static_cast<int32_t>(seq.blocks.size());
  return seq.num_cached_blocks * block_size_;
}

std::vector<int32_t> KvCacheManager::import_prefix(std::span<const int32_t> tokens, int32_t first_block,
                                                   int32_t num_blocks) {
  if (first_block < 0 || num_blocks < 0) fail("kv cache manager: import of blocks [{}, +{})", first_block, num_blocks);
  if (static_cast<int64_t>(tokens.size()) < static_cast<int64_t>(first_block + num_blocks) * block_size_) {
    fail("kv cache manager: import of {} blocks from block {} but only {} tokens", num_blocks, first_block,
         tokens.size());
  }
  if (!radix_) return {};
  const int32_t end = std::min(first_block + num_blocks, max_shared_blocks_);
  // Held while allocating, so that eviction cannot take back a block matched or inserted here.
  SequenceBlocks held;
  auto match = radix_->match(tokens, end);
  held.blocks = std::move(match.blocks);
  RadixNode* node = match.node;
  const auto num_matched = static_cast<int32_t>(held.blocks.size());
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
      const auto inserted = radix_->insert(node, tokens.subspan(static_cast<size_t>(b) * block_size_, block_size_), *block);
      if (!inserted.node) {
        pool_.release(*block);
        break;
      }
      held.blocks.push_back(*block);
      node = inserted.node;
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
}

bool KvCacheManager::allocate(SequenceBlocks& seq, int64_t num_tokens) {
  const int32_t needed = blocks_for(num_tokens) - static_cast<int32_t>(seq.blocks.size());
  if (needed <= 0) return true;
  if (needed > num_available_blocks()) return false;
  if (needed > pool_.num_free_blocks()) radix_->evict(needed - pool_.num_free_blocks());
  for (int32_t i = 0; i < needed; ++i) {
    const auto block = pool_.allocate();
    if (!block) fail("kv cache manager: pool ran dry after eviction promised {} blocks", needed);
    seq.blocks.push_back(*block);
  }
  return true;
}

void KvCacheManager::cache_blocks(SequenceBlocks& seq, std::span<const int32_t> tokens, int64_t num_computed_tokens) {
  if (!radix_) return;
  if (!seq.cached_node) seq.cached_node = radix_->root();
  const int64_t num_full =
      std::min<int64_t>({num_computed_tokens / block_size_, static_cast<int64_t>(seq.blocks.size()), max_shared_blocks_});
  while (seq.num_cached_blocks < num_full) {
    const int32_t b = seq.num_cached_blocks;
    const auto block_tokens = tokens.subspan(static_cast<size_t>(b) * block_size_, block_size_);
    const auto inserted = radix_->insert(seq.cached_node, block_tokens, seq.blocks[b]);
    if (!inserted.node) return;
    if (inserted.block != seq.blocks[b]) {
      // Another sequence cached the same tokens first: use its block so the table stays one cached path.
      pool_.release(seq.blocks[b]);
      seq.blocks[b] = inserted.block;
    }
    seq.cached_node = inserted.node;
    ++seq.num_cached_blocks;
  }
}

void KvCacheManager::free(SequenceBlocks& seq) {
  // Released last block first so the free stack hands out the prompt's blocks in their original order again.
  for (auto it = seq.blocks.rbegin(); it != seq.blocks.rend(); ++it) pool_.release(*it);
  seq = SequenceBlocks{};
}

SequenceBlocks KvCacheManager::fork(const SequenceBlocks& seq, int32_t num_shared_blocks) {
  if (num_shared_blocks > static_cast<int32_t>(seq.blocks.size())) {
    fail("kv cache manager: fork of {} blocks from a sequence holding {}", num_shared_blocks, seq.blocks.size());
  }
  SequenceBlocks child;
  child.blocks.assign(seq.blocks.begin(), seq.blocks.begin() + num_shared_blocks);
  for (int32_t block : child.blocks) pool_.retain(block);
  child.num_cached_blocks = std::min(num_shared_blocks, seq.num_cached_blocks);
  child.cached_node = seq.cached_node;
  for (int32_t up = seq.num_cached_blocks; up > child.num_cached_blocks; --up) child.cached_node = child.cached_node->parent;
  return child;
}

}  // namespace tern
