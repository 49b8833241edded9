// KvCacheManager::import_prefix: KV computed elsewhere becomes a cached prefix that match_prefix then reuses.
#include <gtest/gtest.h>

#include <numeric>

#include "core/error.h"
#include "kvcache/kv_cache_manager.h"

namespace tern {
namespace {

std::vector<int32_t> iota_tokens(int32_t n) {
  std::vector<int32_t> t(n);
  std::iota(t.begin(), t.end(), 100);
  return t;
}

TEST(ImportPrefix, ImportedBlocksAreMatchedByALaterRequest) {
  KvCacheManager kv(16, 4, true);
  const auto tokens = iota_tokens(13);
  const auto first = kv.import_prefix(tokens, 0, 2);
  ASSERT_EQ(first.size(), 2u);
  EXPECT_NE(first[0], first[1]);
  const auto second = kv.import_prefix(tokens, 2, 1);  // the next chunk
  ASSERT_EQ(second.size(), 1u);
  EXPECT_GE(second[0], 0);
  EXPECT_EQ(kv.num_available_blocks(), 16);  // held by the cache only: evictable

  SequenceBlocks seq;
  EXPECT_EQ(kv.match_prefix(seq, tokens), 12);
  EXPECT_EQ(seq.tables[0], (std::vector<int32_t>{first[0], first[1], second[0]}));
  kv.free(seq);
}

TEST(ImportPrefix, BlocksCachedAlreadyAreNotFilledAgain) {
  KvCacheManager kv(16, 4, true);
  const auto tokens = iota_tokens(13);
  const auto first = kv.import_prefix(tokens, 0, 2);
  const auto again = kv.import_prefix(tokens, 0, 3);
  ASSERT_EQ(again.size(), 3u);
  EXPECT_EQ(again[0], -1);
  EXPECT_EQ(again[1], -1);
  EXPECT_GE(again[2], 0);
  EXPECT_NE(again[2], first[0]);
  EXPECT_NE(again[2], first[1]);
}

TEST(ImportPrefix, AChunkWhoseEarlierBlocksAreMissingIsNotImported) {
  KvCacheManager kv(16, 4, true);
  const auto tokens = iota_tokens(13);
  EXPECT_TRUE(kv.import_prefix(tokens, 1, 2).empty());
  SequenceBlocks seq;
  EXPECT_EQ(kv.match_prefix(seq, tokens), 0);
  EXPECT_EQ(kv.num_free_blocks(), 16);
}

TEST(ImportPrefix, StopsWhenThePoolRunsDry) {
  KvCacheManager kv(4, 4, true);
  SequenceBlocks busy;
  ASSERT_TRUE(kv.allocate(busy, 0, 8));  // 2 of 4 blocks in use by a running sequence
  const auto tokens = iota_tokens(17);
  const auto imported = kv.import_prefix(tokens, 0, 4);
  EXPECT_EQ(imported.size(), 2u);
  SequenceBlocks seq;
  EXPECT_EQ(kv.match_prefix(seq, tokens), 8);
  kv.free(seq);
  kv.free(busy);
}

TEST(ImportPrefix, NothingIsImportedWithoutAPrefixCache) {
  KvCacheManager kv(16, 4, false);
  EXPECT_TRUE(kv.import_prefix(iota_tokens(13), 0, 3).empty());
  EXPECT_EQ(kv.num_free_blocks(), 16);
}

TEST(ImportPrefix, TooFewTokensForTheBlocksIsAnError) {
  KvCacheManager kv(16, 4, true);
  EXPECT_THROW(kv.import_prefix(iota_tokens(7), 0, 2), Error);
}

}  // namespace
}  // namespace tern
