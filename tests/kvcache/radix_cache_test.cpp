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

// Caches `tokens` block by block with freshly allocated blocks (one per group), as a sequence would, then lets go
// of them. Returns each block's blocks, group by group.
std::vector<std::vector<int32_t>> cache_sequence(BlockPool& pool, RadixCache& cache, const std::vector<int32_t>& tokens) {
  std::vector<std::vector<int32_t>> blocks;
  RadixNode* node = cache.root();
  for (size_t b = 0; b + kBlock <= tokens.size(); b += kBlock) {
    std::vector<int32_t> own(cache.num_groups());
    for (auto& block : own) block = *pool.allocate();
    std::vector<int32_t> used = own;
    node = cache.insert(node, std::span(tokens).subspan(b, kBlock), used);
    for (size_t g = 0; g < own.size(); ++g) {
      if (used[g] != own[g]) pool.release(own[g]);
    }
    blocks.push_back(used);
  }
  for (const auto& per_group : blocks) {
    for (int32_t block : per_group) pool.release(block);
  }
  return blocks;
}

// The first group's block of each node of `path`.
std::vector<int32_t> first_group_blocks(const std::vector<RadixNode*>& path) {
  std::vector<int32_t> blocks;
  for (const RadixNode* node : path) blocks.push_back(node->blocks[0]);
  return blocks;
}

std::vector<int32_t> first_group_blocks(const std::vector<std::vector<int32_t>>& blocks) {
  std::vector<int32_t> first;
  for (const auto& per_group : blocks) first.push_back(per_group[0]);
  return first;
}

TEST(RadixCache, MatchesTheLongestCachedPrefixInWholeBlocks) {
  BlockPool pool(16);
  RadixCache cache(pool, kBlock);
  const auto tokens = iota_tokens(10);  // two whole blocks and a partial one
  const auto blocks = first_group_blocks(cache_sequence(pool, cache, tokens));
  ASSERT_EQ(blocks.size(), 2u);
  EXPECT_EQ(cache.num_nodes(), 2);

  auto query = iota_tokens(12);
  query[6] = 99;  // diverges inside the second block
  EXPECT_EQ(first_group_blocks(cache.match(query, 100)), std::vector<int32_t>{blocks[0]});
  EXPECT_EQ(pool.ref_count(blocks[0]), 1);  // a match retains nothing: the caller retains what it keeps
  EXPECT_EQ(first_group_blocks(cache.match(iota_tokens(12), 100)), blocks);
  EXPECT_EQ(cache.match(iota_tokens(12), 1).size(), 1u);  // capped
  EXPECT_TRUE(cache.match(iota_tokens(12, 1), 100).empty());
}

TEST(RadixCache, SecondInsertOfTheSameTokensReturnsTheFirstBlock) {
  BlockPool pool(8);
  RadixCache cache(pool, kBlock);
  const auto tokens = iota_tokens(4);
  const int32_t first = *pool.allocate();
  int32_t a[] = {first};
  RadixNode* node_a = cache.insert(cache.root(), tokens, a);
  EXPECT_EQ(a[0], first);
  int32_t b[] = {*pool.allocate()};
  RadixNode* node_b = cache.insert(cache.root(), tokens, b);
  EXPECT_EQ(b[0], first);
  EXPECT_EQ(node_b, node_a);
  EXPECT_EQ(pool.ref_count(first), 3);  // cache + both callers
  EXPECT_EQ(cache.num_nodes(), 1);
}

TEST(RadixCache, EvictsUnreferencedLeavesLeastRecentlyUsedFirst) {
  BlockPool pool(8);
  RadixCache cache(pool, kBlock);
  const auto old_blocks = first_group_blocks(cache_sequence(pool, cache, iota_tokens(8, 0)));    // used first
  const auto new_blocks = first_group_blocks(cache_sequence(pool, cache, iota_tokens(8, 100)));  // used later
  EXPECT_EQ(pool.num_free_blocks(), 4);
  EXPECT_EQ(pool.num_cached_idle_blocks(), 4);

  // Evicting one block takes the leaf of the older sequence.
  EXPECT_EQ(cache.evict(1), 1);
  EXPECT_EQ(pool.ref_count(old_blocks[1]), 0);
  EXPECT_EQ(pool.ref_count(old_blocks[0]), 1);

  // A referenced prefix survives eviction of everything else.
  const auto held = first_group_blocks(cache.match(iota_tokens(8, 100), 100));
  ASSERT_EQ(held, new_blocks);
  for (int32_t b : held) pool.retain(b);
  EXPECT_EQ(cache.evict(10), 1);  // only the older sequence's first block could go
  EXPECT_EQ(cache.num_nodes(), 2);
  for (int32_t b : held) pool.release(b);
  EXPECT_EQ(cache.evict(10), 2);  // leaf first, then its parent
  EXPECT_EQ(pool.num_free_blocks(), 8);
}

TEST(RadixCache, DropsSlidingWindowBlocksFromInnerNodesAndKeepAllBlocksLeafFirst) {
  BlockPool pool(16);
  RadixCache cache(pool, kBlock, {false, true});
  const auto blocks = cache_sequence(pool, cache, iota_tokens(12));  // three nodes, a block of each group in each
  EXPECT_EQ(pool.num_cached_idle_blocks(), 6);
  // A sequence holding the whole keep-all path and only the sliding block of the last node.
  for (const auto& per_group : blocks) pool.retain(per_group[0]);
  pool.retain(blocks[2][1]);
  // The two sliding blocks before it go, from inner nodes; nothing else may.
  EXPECT_EQ(cache.evict(10), 2);
  const auto path = cache.match(iota_tokens(12), 100);
  ASSERT_EQ(path.size(), 3u);
  EXPECT_EQ(path[0]->blocks[1], kNoBlock);
  EXPECT_EQ(path[1]->blocks[1], kNoBlock);
  EXPECT_EQ(path[2]->blocks[1], blocks[2][1]);
  EXPECT_EQ(path[0]->blocks[0], blocks[0][0]);
  // Once the sequence lets go, the leaf goes with both its blocks, then its ancestors' keep-all blocks.
  for (const auto& per_group : blocks) pool.release(per_group[0]);
  pool.release(blocks[2][1]);
  EXPECT_EQ(cache.evict(10), 4);
  EXPECT_EQ(cache.num_nodes(), 0);
  EXPECT_EQ(pool.num_free_blocks(), 16);
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
