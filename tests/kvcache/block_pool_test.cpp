#include "kvcache/block_pool.h"

#include <gtest/gtest.h>

#include <set>

#include "core/error.h"

namespace tern {
namespace {

TEST(BlockPool, AllocatesEveryBlockOnceThenRunsDry) {
  BlockPool pool(4);
  std::set<int32_t> seen;
  for (int i = 0; i < 4; ++i) {
    const auto block = pool.allocate();
    ASSERT_TRUE(block);
    EXPECT_TRUE(seen.insert(*block).second);
    EXPECT_EQ(pool.ref_count(*block), 1);
  }
  EXPECT_FALSE(pool.allocate());
  EXPECT_EQ(pool.num_free_blocks(), 0);
}

TEST(BlockPool, SharedBlockIsFreedByItsLastReference) {
  BlockPool pool(2);
  const int32_t block = *pool.allocate();
  pool.retain(block);
  pool.release(block);
  EXPECT_EQ(pool.num_free_blocks(), 1);
  pool.release(block);
  EXPECT_EQ(pool.num_free_blocks(), 2);
  EXPECT_THROW(pool.release(block), Error);
  EXPECT_THROW(pool.retain(7), Error);
}

TEST(BlockPool, CountsBlocksHeldOnlyByTheCache) {
  BlockPool pool(3);
  const int32_t block = *pool.allocate();  // a sequence's reference
  pool.retain(block);                      // the cache's reference
  pool.set_cached(block, true);
  EXPECT_EQ(pool.num_cached_idle_blocks(), 0);
  pool.release(block);  // the sequence finishes
  EXPECT_EQ(pool.num_cached_idle_blocks(), 1);
  pool.retain(block);  // a new sequence reuses the prefix
  EXPECT_EQ(pool.num_cached_idle_blocks(), 0);
  pool.release(block);
  pool.set_cached(block, false);
  pool.release(block);  // the cache evicts it
  EXPECT_EQ(pool.num_cached_idle_blocks(), 0);
  EXPECT_EQ(pool.num_free_blocks(), 3);
}

}  // namespace
}  // namespace tern
