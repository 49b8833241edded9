#include "engine/stop_string_matcher.h"

#include <gtest/gtest.h>

namespace tern {
namespace {

TEST(StopStringMatcher, FindsAStopStringSpanningDeltasAndCutsBeforeIt) {
  StopStringMatcher matcher({"END"});
  auto r = matcher.push("hello E");
  EXPECT_EQ(r.text, "hello ");  // "E" could start the stop string: held back
  EXPECT_FALSE(r.stopped);
  r = matcher.push("N");
  EXPECT_EQ(r.text, "");
  r = matcher.push("D and more");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.text, "");
}

TEST(StopStringMatcher, ReleasesHeldTextWhenTheMatchFails) {
  StopStringMatcher matcher({"END", "xyz"});
  EXPECT_EQ(matcher.push("aE").text, "a");
  EXPECT_EQ(matcher.push("Nx").text, "EN");  // "ENx" cannot become "END"; "x" may start "xyz"
  EXPECT_EQ(matcher.flush(), "x");
}

TEST(StopStringMatcher, EarliestOfSeveralStopStringsWins) {
  StopStringMatcher matcher({"cd", "b"});
  const auto r = matcher.push("abcd");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.text, "a");
}

}  // namespace
}  // namespace tern
