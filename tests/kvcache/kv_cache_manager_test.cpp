#include "kvcache/kv_cache_manager.h"

#include <gtest/gtest.h>

#include <algorithm>
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
  ASSERT_TRUE(kv.allocate(first, 0, 12));
  EXPECT_EQ(first.num_blocks(), 3);
  kv.cache_blocks(first, tokens, 12);
  EXPECT_EQ(first.num_cached_blocks, 3);
  kv.free(first);

  SequenceBlocks same;
  EXPECT_EQ(kv.match_prefix(same, tokens), 8);  // 12 tokens cached, but the 12th must be recomputed
  SequenceBlocks longer;
  auto extended = iota_tokens(14);
  EXPECT_EQ(kv.match_prefix(longer, extended), 12);
  EXPECT_EQ(longer.num_blocks(), 3);
  EXPECT_EQ(same.tables[0], std::vector<int32_t>(longer.tables[0].begin(), longer.tables[0].begin() + 2));
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
  ASSERT_TRUE(kv.allocate(first, 0, 16));
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
  ASSERT_TRUE(kv.allocate(cached, 0, 16));
  kv.cache_blocks(cached, iota_tokens(16), 16);
  kv.free(cached);
  EXPECT_EQ(kv.num_free_blocks(), 0);
  EXPECT_EQ(kv.num_available_blocks(), 4);

  SequenceBlocks seq;
  ASSERT_TRUE(kv.allocate(seq, 0, 9));  // three blocks: the cache gives up its least recently used leaves
  EXPECT_EQ(seq.num_blocks(), 3);
  SequenceBlocks other;
  EXPECT_FALSE(kv.allocate(other, 0, 8));
  EXPECT_EQ(other.num_blocks(), 0);
  EXPECT_DOUBLE_EQ(kv.usage(), 0.75);
  kv.free(seq);
  EXPECT_EQ(kv.num_available_blocks(), 4);
}

// Speculative decoding's rollback: the blocks of rejected drafts go back, cached ones never do.
TEST(KvCacheManager, TruncateGivesBackTheBlocksPastTheTokensKeptButNotCachedOnes) {
  KvCacheManager kv(8, 4, true);
  const auto tokens = iota_tokens(9);
  SequenceBlocks seq;
  ASSERT_TRUE(kv.allocate(seq, 0, 9));  // 3 blocks, the last holding token 8 only
  kv.cache_blocks(seq, tokens, 8);
  ASSERT_EQ(seq.num_cached_blocks, 2);
  ASSERT_TRUE(kv.allocate(seq, 9, 17));  // 9 tokens plus 8 drafts: 5 blocks
  EXPECT_EQ(seq.num_blocks(), 5);
  kv.truncate(seq, 10);  // one draft kept
  EXPECT_EQ(seq.num_blocks(), 3);
  EXPECT_EQ(kv.num_free_blocks(), 5);
  kv.truncate(seq, 2);
  EXPECT_EQ(seq.num_blocks(), 2);  // the cached blocks stay
  kv.free(seq);
  EXPECT_EQ(kv.num_available_blocks(), 8);
}

TEST(KvCacheManager, ForkSharesBlocksByReference) {
  KvCacheManager kv(8, 4, true);
  SequenceBlocks parent;
  ASSERT_TRUE(kv.allocate(parent, 0, 10));
  kv.cache_blocks(parent, iota_tokens(10), 10);
  SequenceBlocks child = kv.fork(parent, 2);
  EXPECT_EQ(child.tables[0], std::vector<int32_t>(parent.tables[0].begin(), parent.tables[0].begin() + 2));
  EXPECT_EQ(child.num_cached_blocks, 2);
  ASSERT_TRUE(kv.allocate(child, 8, 11));
  EXPECT_EQ(kv.num_free_blocks(), 8 - 4);
  kv.free(parent);
  kv.free(child);
  EXPECT_EQ(kv.num_available_blocks(), 8);
}

TEST(KvCacheManager, DuplicateBlocksFoldIntoTheCachedOne) {
  KvCacheManager kv(8, 4, true);
  SequenceBlocks a, b;
  ASSERT_TRUE(kv.allocate(a, 0, 8));
  ASSERT_TRUE(kv.allocate(b, 0, 8));  // computed the same prompt concurrently
  kv.cache_blocks(a, iota_tokens(8), 8);
  kv.cache_blocks(b, iota_tokens(8), 8);
  EXPECT_EQ(a.tables, b.tables);
  EXPECT_EQ(kv.num_free_blocks(), 6);
  kv.free(a);
  kv.free(b);
  EXPECT_EQ(kv.num_available_blocks(), 8);
}

TEST(KvCacheManager, WithoutPrefixCacheNothingIsShared) {
  KvCacheManager kv(4, 4, false);
  SequenceBlocks seq;
  ASSERT_TRUE(kv.allocate(seq, 0, 8));
  kv.cache_blocks(seq, iota_tokens(8), 8);
  kv.free(seq);
  EXPECT_EQ(kv.num_free_blocks(), 4);
  SequenceBlocks again;
  EXPECT_EQ(kv.match_prefix(again, iota_tokens(8)), 0);
}

// gpt-oss's layout: a keep-all group and a sliding-window group of 8 tokens, blocks of 4.
constexpr int32_t kBlock = 4;
constexpr int64_t kWindow = 8;

// By definition: the blocks of the window that a query at `position` reads, [position - window + 1, position].
int32_t window_blocks(int64_t position) {
  const int64_t first = std::max<int64_t>(0, position - kWindow + 1);
  return static_cast<int32_t>(position / kBlock - first / kBlock + 1);
}

TEST(KvCacheManager, ASlidingGroupReturnsBlocksPastItsWindowToThePoolDuringALongGeneration) {
  KvCacheManager kv(64, kBlock, false, 0, {0, kWindow});
  SequenceBlocks seq;
  ASSERT_TRUE(kv.allocate(seq, 0, 10));  // the prompt in one step
  for (int64_t position = 10; position < 120; ++position) {  // then one token a step
    ASSERT_TRUE(kv.allocate(seq, position, position + 1));
    const int32_t keep_all = static_cast<int32_t>(position / kBlock + 1);
    EXPECT_EQ(kv.num_free_blocks(), 64 - keep_all - window_blocks(position)) << position;
    EXPECT_LE(window_blocks(position), (kWindow + kBlock - 1) / kBlock + 1);
    for (int32_t b = 0; b < seq.num_blocks(); ++b) {
      const bool read = b >= (position - kWindow + 1) / kBlock;
      EXPECT_EQ(seq.tables[1][b] != kNoBlock, read) << "block " << b << " at " << position;
      EXPECT_NE(seq.tables[0][b], kNoBlock);
    }
  }
  kv.free(seq);
  EXPECT_EQ(kv.num_free_blocks(), 64);
}

TEST(KvCacheManager, AllSlidingLayersDropTheirBlocksToo) {
  KvCacheManager kv(16, kBlock, false, 0, {kWindow});
  SequenceBlocks seq;
  for (int64_t position = 0; position < 200; ++position) {
    ASSERT_TRUE(kv.allocate(seq, position, position + 1)) << position;  // 200 tokens in 16 blocks of 4
    EXPECT_EQ(kv.num_free_blocks(), 16 - window_blocks(position));
  }
  kv.free(seq);
  EXPECT_EQ(kv.num_free_blocks(), 16);
}

TEST(KvCacheManager, DroppedBlocksTheCacheHoldsBecomeEvictableAndAPrefixHitEndsWhereItsWindowIsCached) {
  KvCacheManager kv(64, kBlock, true, 0, {0, kWindow});
  const auto tokens = iota_tokens(41);
  SequenceBlocks seq;
  ASSERT_TRUE(kv.allocate(seq, 0, 20));
  // The second chunk's first query reads from token 13 on: sliding blocks 0..2 go before the cache ever saw them.
  ASSERT_TRUE(kv.allocate(seq, 20, 40));
  EXPECT_EQ(kv.num_free_blocks(), 64 - 10 - 7);
  kv.cache_blocks(seq, tokens, 40);
  // Dropping blocks the cache holds too leaves them cached, evictable.
  ASSERT_TRUE(kv.allocate(seq, 40, 41));
  EXPECT_EQ(kv.num_free_blocks(), 64 - 11 - 3 - 5);
  EXPECT_EQ(kv.num_available_blocks(), 64 - 11 - 3);
  kv.free(seq);
  EXPECT_EQ(kv.num_available_blocks(), 64);

  // Expected hits from the definition: the longest n whose keep-all blocks are cached and whose sliding blocks
  // [(4n - 7) / 4, n) are, with sliding blocks 0..2 missing.
  const std::pair<int32_t, int32_t> queries[] = {{41, 40}, {29, 28}, {21, 20}, {17, 0}, {9, 0}};
  for (const auto& [query_len, expected_hit] : queries) {
    SequenceBlocks hit;
    const auto query = iota_tokens(query_len);
    EXPECT_EQ(kv.match_prefix(hit, query), expected_hit) << query_len;
    const int32_t num_hit = expected_hit / kBlock;
    ASSERT_EQ(hit.num_blocks(), num_hit);
    for (int32_t b = 0; b < num_hit; ++b) {
      EXPECT_NE(hit.tables[0][b], kNoBlock);
      EXPECT_EQ(hit.tables[1][b] != kNoBlock, b >= (expected_hit - kWindow + 1) / kBlock) << b;
    }
    kv.free(hit);
  }
  EXPECT_EQ(kv.num_available_blocks(), 64);
}

TEST(KvCacheManager, AForkOfAHybridSequenceSharesOnlyWhatItsWindowStillHolds) {
  KvCacheManager kv(64, kBlock, true, 0, {0, kWindow});
  SequenceBlocks parent;
  ASSERT_TRUE(kv.allocate(parent, 0, 20));
  ASSERT_TRUE(kv.allocate(parent, 20, 30));  // sliding blocks 0..2 dropped (reads from token 13)
  // Sharing 5 blocks needs sliding blocks 3 and 4 (reads from token 13): held. Sharing 3 would need 1 and 2: dropped,
  // and 2 needs 0 and 1, 1 needs 0: the fork shares none.
  SequenceBlocks five = kv.fork(parent, 5);
  EXPECT_EQ(five.num_blocks(), 5);
  EXPECT_EQ(five.tables[1][2], kNoBlock);
  EXPECT_EQ(five.tables[1][3], parent.tables[1][3]);
  SequenceBlocks three = kv.fork(parent, 3);
  EXPECT_EQ(three.num_blocks(), 0);
  kv.free(five);
  kv.free(three);
  kv.free(parent);
  EXPECT_EQ(kv.num_available_blocks(), 64);
}

// The same memory holds twice as many blocks when a block id's storage is one group's layers (1 full + 1 sliding
// layer, 2 KV heads x 16 dims, float32: 256 bytes per token slot instead of 512), and a sequence of 256 tokens
// prefilled in chunks of 16 holds 16 keep-all blocks plus the at most 3 blocks of its 32-token window instead of
// 16 more.
TEST(KvCacheBudget, ASlidingGroupFitsMoreSequencesInTheSameMemory) {
  constexpr int64_t kMemory = 1 << 20;
  constexpr int64_t kLayerBytes = 2 * 16 * 2 * 4;
  const auto count_sequences = [](const KvCacheBudget& budget, std::vector<int64_t> windows) {
    KvCacheManager kv(budget.num_blocks, budget.block_size, false, 0, std::move(windows));
    std::vector<SequenceBlocks> seqs;
    for (;;) {
      SequenceBlocks seq;
      for (int64_t chunk = 0; chunk < 256; chunk += 16) {
        if (!kv.allocate(seq, chunk, chunk + 16)) {
          kv.free(seq);
          for (auto& held : seqs) kv.free(held);
          return seqs.size();
        }
      }
      seqs.push_back(std::move(seq));
    }
  };
  const auto one_group = kv_cache_budget_for_memory(2 * kLayerBytes, 16, kMemory);
  const auto two_groups = kv_cache_budget_for_memory(kLayerBytes, 16, kMemory);
  EXPECT_EQ(one_group.num_blocks, 128);
  EXPECT_EQ(two_groups.num_blocks, 256);
  EXPECT_EQ(count_sequences(one_group, {0}), 128u / 16);
  // The last chunk's queries read from token 240 - 31 = 209 on: sliding blocks 13..15.
  EXPECT_EQ(count_sequences(two_groups, {0, 32}), 256u / (16 + 3));
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
