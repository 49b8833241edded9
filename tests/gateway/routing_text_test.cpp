#include "gateway/routing_text.h"

#include <gtest/gtest.h>

namespace tern::gateway {
namespace {

TEST(RoutingText, CompletionPromptIsItsText) {
  EXPECT_EQ(routing_text("/v1/completions", R"({"prompt": "Once upon", "max_tokens": 3})"), "Once upon");
}

TEST(RoutingText, TokenPromptsSharePrefixesAsText) {
  const std::string a = routing_text("/v1/completions", R"({"prompt": [1, 2, 3, 4]})");
  const std::string b = routing_text("/v1/completions", R"({"prompt": [1, 2, 3, 9]})");
  EXPECT_EQ(a, "1,2,3,4,");
  EXPECT_EQ(a.substr(0, 6), b.substr(0, 6));
}

TEST(RoutingText, ChatMessagesKeepTheirOrderAndBoundaries) {
  const std::string one = routing_text(
      "/v1/chat/completions",
      R"({"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]})");
  const std::string two = routing_text(
      "/v1/chat/completions",
      R"({"messages": [{"role": "system", "content": "Be brief."},
                       {"role": "user", "content": [{"type": "text", "text": "Hi"}]},
                       {"role": "assistant", "content": "Hello"}]})");
  EXPECT_EQ(two.substr(0, one.size()), one);  // a longer conversation extends the shorter one's text
  EXPECT_NE(one.find("Be brief."), std::string::npos);
  // The boundary between messages is part of the text: "ab"+"c" differs from "a"+"bc".
  EXPECT_NE(routing_text("/v1/chat/completions",
                         R"({"messages": [{"role": "user", "content": "ab"}, {"role": "user", "content": "c"}]})"),
            routing_text("/v1/chat/completions",
                         R"({"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "bc"}]})"));
}

TEST(RoutingText, BadBodiesYieldNothing) {
  EXPECT_EQ(routing_text("/v1/completions", "not json"), "");
  EXPECT_EQ(routing_text("/v1/completions", "[1, 2]"), "");
  EXPECT_EQ(routing_text("/v1/chat/completions", R"({"messages": "nope"})"), "");
  EXPECT_EQ(routing_text("/v1/models", R"({"prompt": "x"})"), "");
}

TEST(RoutingText, DeeplyNestedPromptsRouteWithoutText) {
  // A prompt of nested lists (no replica accepts one) used to be walked once per level, before any credential check.
  for (size_t depth : {65'000, 650'000}) {
    const std::string body = R"({"prompt": )" + std::string(depth, '[') + "1" + std::string(depth, ']') + "}";
    EXPECT_EQ(routing_text("/v1/completions", body), "");
  }
  EXPECT_EQ(routing_text("/v1/completions", R"({"prompt": [[1, 2], [3]]})"), std::string("1,2,\x1e") + "3,\x1e");
}

}  // namespace
}  // namespace tern::gateway
