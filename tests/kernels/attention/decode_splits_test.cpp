// The split-KV plan's share count: one full wave of blocks at long contexts, and at short ones a share per 64 keys
// in powers of two, so that the recorded graphs of a batch size are few and each serves a range of lengths; and
// where the all-heads kernel takes over; and how a token's keys are cut into the shares.
#include <gtest/gtest.h>

#include <algorithm>

#include "attention/decode_attention.h"
#include "attention/key_shares.h"

namespace tern::kernels {
namespace {

constexpr int kSms = 132;  // the H200's
constexpr int kKvHeads = 8;

TEST(DecodeSplitsTest, OneFullWaveAtLongContexts) {
  EXPECT_EQ(decode_attention_num_splits(1, kKvHeads, kSms, 32768), 33);  // 264 blocks: two an SM
  EXPECT_EQ(decode_attention_num_splits(8, kKvHeads, kSms, 32768), 4);
  EXPECT_EQ(decode_attention_num_splits(64, kKvHeads, kSms, 32768), 1);
  EXPECT_EQ(decode_attention_num_splits(1, 1, kSms, 1 << 20), kDecodeMaxSplits);
}

TEST(DecodeSplitsTest, AShareFor64KeysRoundedUpToAPowerOfTwo) {
  EXPECT_EQ(decode_attention_num_splits(1, kKvHeads, kSms, 1), 1);
  EXPECT_EQ(decode_attention_num_splits(1, kKvHeads, kSms, 64), 1);
  EXPECT_EQ(decode_attention_num_splits(1, kKvHeads, kSms, 65), 2);
  EXPECT_EQ(decode_attention_num_splits(1, kKvHeads, kSms, 129), 4);
  EXPECT_EQ(decode_attention_num_splits(1, kKvHeads, kSms, 385), 8);
  EXPECT_EQ(decode_attention_num_splits(1, kKvHeads, kSms, 2048), 32);
  EXPECT_EQ(decode_attention_num_splits(1, kKvHeads, kSms, 2049), 33);  // capped by the wave
  EXPECT_EQ(decode_attention_num_splits(8, kKvHeads, kSms, 200), 4);
  EXPECT_EQ(decode_attention_num_splits(8, kKvHeads, kSms, 300), 4);
  EXPECT_EQ(decode_attention_num_splits(4, kKvHeads, kSms, 1100), 8);  // capped by the wave (8.25 shares)
}

TEST(DecodeSplitsTest, AllHeadsOnceTokensTimesKvHeadsOutnumberTheSms) {
  EXPECT_FALSE(plan_decode_attention(1, {kKvHeads}, kSms, 1 << 20).all_heads);
  EXPECT_FALSE(plan_decode_attention(16, {kKvHeads}, kSms, 32768).all_heads);  // 128 (token, KV head) pairs
  const DecodeAttentionPlan batch_17 = plan_decode_attention(17, {kKvHeads}, kSms, 32768);
  EXPECT_TRUE(batch_17.all_heads);
  EXPECT_EQ(batch_17.num_splits, 7);  // a block an SM: 119 of 132
  EXPECT_EQ(plan_decode_attention(32, {kKvHeads}, kSms, 32768).num_splits, 4);
  EXPECT_EQ(plan_decode_attention(200, {kKvHeads}, kSms, 32768).num_splits, 1);
  EXPECT_TRUE(plan_decode_attention(140, {1}, kSms, 300).all_heads);
  // Keys: at least 128 an SM (16,896 on 132).
  EXPECT_FALSE(plan_decode_attention(128, {kKvHeads}, kSms, 131).all_heads);
  EXPECT_TRUE(plan_decode_attention(128, {kKvHeads}, kSms, 132).all_heads);
  // More KV heads than a block holds: per KV head, as decode_attention_num_splits plans.
  const DecodeAttentionPlan wide = plan_decode_attention(32, {16}, kSms, 32768);
  EXPECT_FALSE(wide.all_heads);
  EXPECT_EQ(wide.num_splits, decode_attention_num_splits(32, 16, kSms, 32768));
  // A block an SM, within what the merge takes.
  EXPECT_EQ(decode_attention_all_heads_splits(1, kSms), kDecodeMaxSplits);
  // Short contexts: per KV head.
  const DecodeAttentionPlan short_context = plan_decode_attention(1, {kKvHeads}, kSms, 385);
  EXPECT_FALSE(short_context.all_heads);
  EXPECT_EQ(short_context.num_splits, 8);
}

// The all-heads kernel reads bf16 caches only: a model with an FP8 cache (DecodeLayers::all_heads false) keeps the
// per-KV-head plan where a bf16 one would switch.
TEST(DecodeSplitsTest, AnFp8CacheKeepsThePerKvHeadPlan) {
  DecodeLayers fp8_layers{kKvHeads};
  fp8_layers.all_heads = false;
  const DecodeAttentionPlan plan = plan_decode_attention(32, fp8_layers, kSms, 32768);
  EXPECT_FALSE(plan.all_heads);
  EXPECT_EQ(plan.num_splits, decode_attention_num_splits(32, kKvHeads, kSms, 32768));
  EXPECT_TRUE(plan_decode_attention(32, {kKvHeads}, kSms, 32768).all_heads);
}

TEST(DecodeSplitsTest, OneWholeContextShareAtShortContextsAndFewTokens) {
  const DecodeLayers layers{kKvHeads, true};
  const DecodeAttentionPlan batch_1 = plan_decode_attention(1, layers, kSms, kDecodeWholeContextKeys);
  EXPECT_TRUE(batch_1.whole_context);
  EXPECT_FALSE(batch_1.all_heads);
  EXPECT_EQ(batch_1.num_splits, 1);
  EXPECT_TRUE(plan_decode_attention(16, layers, kSms, 1).whole_context);     // 128 blocks, a block an SM
  EXPECT_FALSE(plan_decode_attention(17, layers, kSms, 100).whole_context);  // 136 blocks
  const DecodeAttentionPlan longer = plan_decode_attention(1, layers, kSms, kDecodeWholeContextKeys + 1);
  EXPECT_FALSE(longer.whole_context);
  EXPECT_EQ(longer.num_splits, 8);
  // Layers that cannot take its kernel: shares of 64 keys.
  const DecodeAttentionPlan shares = plan_decode_attention(1, {kKvHeads, false}, kSms, kDecodeWholeContextKeys);
  EXPECT_FALSE(shares.whole_context);
  EXPECT_EQ(shares.num_splits, 8);
}

// Every key in exactly one share, the shares in order, each starting at a tile and no two more than a tile apart.
void expect_balanced_cover(int first, int end, int num_splits) {
  constexpr int kTile = 64;
  int next = first;
  int fewest = 1 << 30, most = 0;
  for (int c = 0; c < num_splits; ++c) {
    const KeyShare share = key_share<kTile>(first, end, c, num_splits);
    SCOPED_TRACE(testing::Message() << "keys [" << first << ", " << end << "), share " << c << " of " << num_splits);
    EXPECT_EQ(share.begin, next);
    EXPECT_EQ((share.begin - first) % kTile, 0);
    EXPECT_LE(share.begin, share.end);
    EXPECT_EQ(share.num_tiles, (share.end - share.begin + kTile - 1) / kTile);
    next = share.end;
    fewest = std::min(fewest, share.num_tiles);
    most = std::max(most, share.num_tiles);
  }
  EXPECT_EQ(next, end);
  EXPECT_LE(most - fewest, 1);
}

TEST(DecodeSplitsTest, SharesCoverTheKeysInBalancedWholeTiles) {
  expect_balanced_cover(0, 32768, 33);
  expect_balanced_cover(0, 32769, 33);
  expect_balanced_cover(16, 4100, 32);
  expect_balanced_cover(0, 1, 8);  // one key: seven empty shares
  expect_balanced_cover(0, 300, 8);
  expect_balanced_cover(5, 5, 4);  // no keys
  // 512 tiles in 33 shares: 16 of 15 tiles and 17 of 16, none empty (shares of 16 tiles left the 33rd empty).
  int empty = 0;
  for (int c = 0; c < 33; ++c) empty += key_share<64>(0, 32768, c, 33).num_tiles == 0;
  EXPECT_EQ(empty, 0);
}

TEST(DecodeSplitsTest, AtLeastOneShare) {
  EXPECT_EQ(decode_attention_num_splits(0, kKvHeads, kSms, 0), 1);
  EXPECT_EQ(decode_attention_num_splits(1000, kKvHeads, kSms, 4096), 1);
}

}  // namespace
}  // namespace tern::kernels
