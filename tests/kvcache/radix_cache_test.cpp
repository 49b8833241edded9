#include "kvcache/radix_cache.h"

#include <gtest/gtest.h>

#include <numeric>

namespace tern {
namespace {

constexpr int32_t kBlock = 4;

std::vector<int32_t> iota_tokens(int32_t n, int32_t start = 0) {
  std::vector<int32_t> t(n);
  std::iota(t.begin(), t.end(), start);
  return t;
}

// Caches `tokens` block by block with freshly allocated blocks, as a sequence would, then lets go of them.
std::vector<int32_t> cache_sequence(BlockPool& pool, RadixCache& cache, const std::vector<int32_t>& tokens) {
  std::vector<int32_t> blocks;
  RadixNode* node = cache.root();
  for (size_t b = 0; b + kBlock <= tokens.size(); b += kBlock) {
    int32_t block = *pool.allocate();
    const auto inserted = cache.insert(node, std::span(tokens).subspan(b, kBlock), block);
    if (inserted.block != block) {
      pool.release(block);
      block = inserted.block;
    }
    node = inserted.node;
    blocks.push_back(block);
  }
  for (int32_t block : blocks) pool.release(block);
  return blocks;
}

TEST(RadixCache, MatchesTheLongestCachedPrefixInWholeBlocks) {
  BlockPool pool(16);
  RadixCache cache(pool, kBlock);
  const auto tokens = iota_tokens(10);  // two whole blocks and a partial one
  const auto blocks = cache_sequence(pool, cache, tokens);
  ASSERT_EQ(blocks.size(), 2u);
  EXPECT_EQ(cache.num_cached_blocks(), 2);

  auto query = iota_tokens(12);
  query[6] = 99;  // diverges inside the second block
  auto match = cache.match(query, 100);
  EXPECT_EQ(match.blocks, std::vector<int32_t>{blocks[0]});
  EXPECT_EQ(pool.ref_count(blocks[0]), 2);  // the cache's and the caller's
  pool.release(blocks[0]);

  match = cache.match(iota_tokens(12), 100);
  EXPECT_EQ(match.blocks, blocks);
  for (int32_t b : match.blocks) pool.release(b);
  match = cache.match(iota_tokens(12), 1);  // capped
  EXPECT_EQ(match.blocks.size(), 1u);
  pool.release(match.blocks[0]);
  match = cache.match(iota_tokens(12, 1), 100);
  EXPECT_TRUE(match.blocks.empty());
  EXPECT_EQ(match.node, cache.root());
}

TEST(RadixCache, SecondInsertOfTheSameTokensReturnsTheFirstBlock) {
  BlockPool pool(8);
  RadixCache cache(pool, kBlock);
  const auto tokens = iota_tokens(4);
  const int32_t first = *pool.allocate();
  const auto a = cache.insert(cache.root(), tokens, first);
  EXPECT_EQ(a.block, first);
  const int32_t second = *pool.allocate();
  const auto b = cache.insert(cache.root(), tokens, second);
  EXPECT_EQ(b.block, first);
  EXPECT_EQ(b.node, a.node);
  EXPECT_EQ(pool.ref_count(first), 3);  // cache + both callers
  EXPECT_EQ(cache.num_cached_blocks(), 1);
}

TEST(RadixCache, EvictsUnreferencedLeavesLeastRecentlyUsedFirst) {
  BlockPool pool(8);
  RadixCache cache(pool, kBlock);
  const auto old_blocks = cache_sequence(pool, cache, iota_tokens(8, 0));      // used first
  const auto new_blocks = cache_sequence(pool, cache, iota_tokens(8, 100));    // used later
  EXPECT_EQ(pool.num_free_blocks(), 4);
  EXPECT_EQ(pool.num_cached_idle_blocks(), 4);

  // Evicting one block takes the leaf of the older sequence.
  EXPECT_EQ(cache.evict(1), 1);
  EXPECT_EQ(pool.ref_count(old_blocks[1]), 0);
  EXPECT_EQ(pool.ref_count(old_blocks[0]), 1);

  // A referenced prefix survives eviction of everything else.
  auto match = cache.match(iota_tokens(8, 100), 100);
  ASSERT_EQ(match.blocks, new_blocks);
  EXPECT_EQ(cache.evict(10), 1);  // only the older sequence's first block could go
  EXPECT_EQ(cache.num_cached_blocks(), 2);
  for (int32_t b : match.blocks) pool.release(b);
  EXPECT_EQ(cache.evict(10), 2);  // leaf first, then its parent
  EXPECT_EQ(pool.num_free_blocks(), 8);
}

TEST(RadixCache, ReleasesItsBlocksWhenDestroyed) {
  BlockPool pool(4);
  {
    RadixCache cache(pool, kBlock);
    cache_sequence(pool, cache, iota_tokens(16));
    EXPECT_EQ(pool.num_free_blocks(), 0);
  }
  EXPECT_EQ(pool.num_free_blocks(), 4);
}

}  // namespace
}  // namespace tern
