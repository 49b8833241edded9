// The split-KV plan's share count: one full wave of blocks at long contexts, and at short ones a share per 64 keys
// in powers of two, so that the recorded graphs of a batch size are few and each serves a range of lengths.
#include <gtest/gtest.h>

#include "attention/decode_attention.h"

namespace tern::kernels {
namespace {

constexpr int kSms = 132;  // the H200's
constexpr int kKvHeads = 8;

TEST(DecodeSplitsTest, OneFullWaveAtLongContexts) {
  EXPECT_EQ(decode_attention_num_splits(1, kKvHeads, kSms, 32768), 49);  // 392 blocks where 396 fit
  EXPECT_EQ(decode_attention_num_splits(8, kKvHeads, kSms, 32768), 6);
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
  EXPECT_EQ(decode_attention_num_splits(1, kKvHeads, kSms, 2049), 49);  // capped by the wave
  EXPECT_EQ(decode_attention_num_splits(8, kKvHeads, kSms, 200), 4);
  EXPECT_EQ(decode_attention_num_splits(8, kKvHeads, kSms, 300), 6);
}

TEST(DecodeSplitsTest, AtLeastOneShare) {
  EXPECT_EQ(decode_attention_num_splits(0, kKvHeads, kSms, 0), 1);
  EXPECT_EQ(decode_attention_num_splits(1000, kKvHeads, kSms, 4096), 1);
}

}  // namespace
}  // namespace tern::kernels
