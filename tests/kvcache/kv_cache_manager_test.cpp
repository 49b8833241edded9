#include "kvcache/kv_cache_manager.h"

#include <gtest/gtest.h>

#include <numeric>

#include "core/error.h"
#include "kvcache/kv_cache_budget.h"

namespace tern {
namespace {

std::vector<int32_t> iota_tokens(int32_t n, int32_t start = 0) {
  std::vector<int32_t> t(n);
  std::iota(t.begin(), t.end(), start);
  return t;
}

TEST(KvCacheManager, ReusesAPrefixButAlwaysLeavesOneTokenToCompute) {
  KvCacheManager kv(16, 4, true);
  const auto tokens = iota_tokens(12);
  SequenceBlocks first;
  ASSERT_TRUE(kv.allocate(first, 12));
  EXPECT_EQ(first.blocks.size(), 3u);
  kv.cache_blocks(first, tokens, 12);
  EXPECT_EQ(first.num_cached_blocks, 3);
  kv.free(first);

  SequenceBlocks same;
  EXPECT_EQ(kv.match_prefix(same, tokens), 8);  // 12 tokens cached, but the 12th must be recomputed
  SequenceBlocks longer;
  auto extended = iota_tokens(14);
  EXPECT_EQ(kv.match_prefix(longer, extended), 12);
  EXPECT_EQ(longer.blocks.size(), 3u);
  EXPECT_EQ(std::vector<int32_t>(same.blocks.begin(), same.blocks.end()),
            std::vector<int32_t>(longer.blocks.begin(), longer.blocks.begin() + 2));
  kv.free(same);
  kv.free(longer);
  EXPECT_EQ(kv.num_available_blocks(), 16);
}

// A model whose caches depend on more than the tokens past some position (DeepSeek-V4's indexer ties) limits
// sharing to the whole blocks before it: later blocks are neither cached nor matched.
TEST(KvCacheManager, ASharedPrefixLimitCachesAndMatchesOnlyTheBlocksBeforeIt) {
  KvCacheManager kv(16, 4, true, 10);  // 10 tokens: two whole blocks
  const auto tokens = iota_tokens(16);
  SequenceBlocks first;
  ASSERT_TRUE(kv.allocate(first, 16));
  kv.cache_blocks(first, tokens, 16);
  EXPECT_EQ(first.num_cached_blocks, 2);
  kv.free(first);
  EXPECT_EQ(kv.num_free_blocks(), 14);  // the two blocks past the limit went back to the pool

  SequenceBlocks again;
  EXPECT_EQ(kv.match_prefix(again, tokens), 8);
  kv.free(again);
  EXPECT_EQ(kv.num_available_blocks(), 16);
}

TEST(KvCacheManager, AllocationEvictsCachedBlocksAndFailsWithoutChangingAnything) {
  KvCacheManager kv(4, 4, true);
  SequenceBlocks cached;
  ASSERT_TRUE(kv.allocate(cached, 16));
  kv.cache_blocks(cached, iota_tokens(16), 16);
  kv.free(cached);
  EXPECT_EQ(kv.num_free_blocks(), 0);
  EXPECT_EQ(kv.num_available_blocks(), 4);

  SequenceBlocks seq;
  ASSERT_TRUE(kv.allocate(seq, 9));  // three blocks: the cache gives up its least recently used leaves
  EXPECT_EQ(seq.blocks.size(), 3u);
  SequenceBlocks other;
  EXPECT_FALSE(kv.allocate(other, 8));
  EXPECT_TRUE(other.blocks.empty());
  EXPECT_DOUBLE_EQ(kv.usage(), 0.75);
  kv.free(seq);
  EXPECT_EQ(kv.num_available_blocks(), 4);
}

TEST(KvCacheManager, ForkSharesBlocksByReference) {
  KvCacheManager kv(8, 4, true);
  SequenceBlocks parent;
  ASSERT_TRUE(kv.allocate(parent, 10));
  kv.cache_blocks(parent, iota_tokens(10), 10);
  SequenceBlocks child = kv.fork(parent, 2);
  EXPECT_EQ(child.blocks, std::vector<int32_t>(parent.blocks.begin(), parent.blocks.begin() + 2));
  EXPECT_EQ(child.num_cached_blocks, 2);
  ASSERT_TRUE(kv.allocate(child, 11));
  EXPECT_EQ(kv.num_free_blocks(), 8 - 4);
  kv.free(parent);
  kv.free(child);
  EXPECT_EQ(kv.num_available_blocks(), 8);
}

TEST(KvCacheManager, DuplicateBlocksFoldIntoTheCachedOne) {
  KvCacheManager kv(8, 4, true);
  SequenceBlocks a, b;
  ASSERT_TRUE(kv.allocate(a, 8));
  ASSERT_TRUE(kv.allocate(b, 8));  // computed the same prompt concurrently
  kv.cache_blocks(a, iota_tokens(8), 8);
  kv.cache_blocks(b, iota_tokens(8), 8);
  EXPECT_EQ(a.blocks, b.blocks);
  EXPECT_EQ(kv.num_free_blocks(), 6);
  kv.free(a);
  kv.free(b);
  EXPECT_EQ(kv.num_available_blocks(), 8);
}

TEST(KvCacheManager, WithoutPrefixCacheNothingIsShared) {
  KvCacheManager kv(4, 4, false);
  SequenceBlocks seq;
  ASSERT_TRUE(kv.allocate(seq, 8));
  kv.cache_blocks(seq, iota_tokens(8), 8);
  kv.free(seq);
  EXPECT_EQ(kv.num_free_blocks(), 4);
  SequenceBlocks again;
  EXPECT_EQ(kv.match_prefix(again, iota_tokens(8)), 0);
}

TEST(KvCacheBudget, FitsWholeBlocksInTheBudget) {
  const auto budget = kv_cache_budget_for_memory(1024, 16, 1 << 20);
  EXPECT_EQ(budget.num_blocks, 64);
  EXPECT_EQ(budget.num_tokens(), 1024);
  EXPECT_THROW(kv_cache_budget_for_memory(1024, 16, 1000), Error);
  EXPECT_GT(host_available_memory_bytes(), 0);
}

TEST(KvCacheBudget, ParsesSizes) {
  EXPECT_EQ(parse_byte_size("2GiB", "x"), int64_t{2} << 30);
  EXPECT_EQ(parse_byte_size("512MiB", "x"), int64_t{512} << 20);
  EXPECT_EQ(parse_byte_size("1.5GB", "x"), 1500000000);
  EXPECT_EQ(parse_byte_size("4096", "x"), 4096);
  EXPECT_THROW(parse_byte_size("lots", "--kv-cache-memory"), Error);
  EXPECT_THROW(parse_byte_size("2GiBs", "--kv-cache-memory"), Error);
  EXPECT_THROW(parse_byte_size("-1", "--kv-cache-memory"), Error);
}

}  // namespace
}  // namespace tern
