// The end-of-reasoning watch against its definition: the marker's prefix, then (when it has one) its suffix at most
// max_tokens_between tokens later, anywhere in the output; once seen it stays ended.
#include "engine/reasoning_end_detector.h"

#include <gtest/gtest.h>

#include <vector>

namespace tern {
namespace {

// The index of the token that completes the marker, or -1.
int ended_at(const ReasoningEndMarker& marker, const std::vector<int32_t>& output) {
  ReasoningEndDetector detector(marker);
  for (size_t i = 0; i < output.size(); ++i) {
    if (detector.feed(output[i])) return static_cast<int>(i);
  }
  return -1;
}

TEST(ReasoningEndDetector, SingleTokenMarker) {
  const ReasoningEndMarker think_end{{9}, {}, 0};
  EXPECT_EQ(ended_at(think_end, {1, 2, 3}), -1);
  EXPECT_EQ(ended_at(think_end, {9}), 0);
  EXPECT_EQ(ended_at(think_end, {1, 2, 9, 4, 9}), 2);
}

TEST(ReasoningEndDetector, MultiTokenMarkerOverlappingItself) {
  const ReasoningEndMarker marker{{5, 5, 6}, {}, 0};
  EXPECT_EQ(ended_at(marker, {5, 5, 5, 6, 1}), 3);
  EXPECT_EQ(ended_at(marker, {5, 6, 5, 1, 6}), -1);
  EXPECT_EQ(ended_at(marker, {5, 5}), -1);
}

TEST(ReasoningEndDetector, PrefixThenSuffixWithinTheGap) {
  // Harmony: <|channel|>final (7, 8), up to 2 tokens (<|constrain|>json), <|message|> (4).
  const ReasoningEndMarker marker{{7, 8}, {4}, 2};
  EXPECT_EQ(ended_at(marker, {1, 7, 8, 4, 0}), 3);
  EXPECT_EQ(ended_at(marker, {7, 8, 3, 3, 4}), 4);
  EXPECT_EQ(ended_at(marker, {7, 8, 3, 3, 3, 4}), -1);  // too far apart
  EXPECT_EQ(ended_at(marker, {7, 8, 3, 3, 3, 4, 7, 8, 4}), 8);
  EXPECT_EQ(ended_at(marker, {4, 7, 8}), -1);  // the suffix before the prefix
  EXPECT_EQ(ended_at(marker, {7, 4}), -1);
}

TEST(ReasoningEndDetector, StaysEnded) {
  ReasoningEndDetector detector({{9}, {}, 0});
  EXPECT_FALSE(detector.ended());
  EXPECT_TRUE(detector.feed(9));
  EXPECT_TRUE(detector.feed(1));
  EXPECT_TRUE(detector.ended());
}

}  // namespace
}  // namespace tern
