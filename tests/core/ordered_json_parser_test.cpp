// parse_ordered_json against nlohmann's own parser (the reference: same values, key order, duplicate handling and
// errors), and its cost on objects with vocabulary-sized key counts, which nlohmann's parser takes O(n^2) for.
#include "core/ordered_json_parser.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

namespace tern {
namespace {

using Json = nlohmann::ordered_json;

std::string object_of_keys(int num_keys) {
  std::string text = "{";
  for (int i = 0; i < num_keys; ++i) text += (i ? ",\"" : "\"") + std::to_string(i) + "\":" + std::to_string(i % 7);
  return text + "}";
}

TEST(OrderedJsonParserTest, BuildsWhatNlohmannBuilds) {
  const std::vector<std::string> texts = {
      R"({"z": 1, "a": [1, 2.5, -3, 18446744073709551615, true, false, null], "m": {"y": "\u00e9\ud83d\ude00", "b": {}}})",
      R"([{"b": 1, "a": 2}, [], [[[]]], "text", 1e-3])",
      R"("just a string")",
      "  42  ",
      "null",
      object_of_keys(100),  // past any small-object special case
  };
  for (const auto& text : texts) {
    const Json expected = Json::parse(text);
    const Json parsed = parse_ordered_json(text);
    EXPECT_EQ(parsed, expected) << text;
    EXPECT_EQ(parsed.dump(), expected.dump()) << text;  // key order too (== on ordered_json ignores it for objects)
  }
}

TEST(OrderedJsonParserTest, RepeatedKeysKeepTheFirstPlaceAndTheLastValue) {
  const std::string text = R"({"a": 1, "b": {"x": 1, "x": [2]}, "a": 3, "c": 4, "b": 5})";
  const Json parsed = parse_ordered_json(text);
  EXPECT_EQ(parsed.dump(), Json::parse(text).dump());
  EXPECT_EQ(parsed.dump(), R"({"a":3,"b":5,"c":4})");
}

TEST(OrderedJsonParserTest, ErrorsAreNlohmannsErrors) {
  for (const std::string text : {"", "{", R"({"a": })", R"({"a": 1} x)", "[1,]", "\"\xff\"", R"({"a" 1})"}) {
    std::string expected;
    try {
      (void)Json::parse(text);
    } catch (const Json::parse_error& e) {
      expected = e.what();
    }
    ASSERT_FALSE(expected.empty()) << text;
    try {
      (void)parse_ordered_json(text);
      ADD_FAILURE() << "no error for " << text;
    } catch (const Json::parse_error& e) {
      EXPECT_EQ(std::string(e.what()), expected);
    }
    EXPECT_TRUE(parse_ordered_json(text, /*allow_exceptions=*/false).is_discarded()) << text;
  }
  EXPECT_THROW((void)parse_ordered_json("[1e400]"), Json::out_of_range);  // as Json::parse: no double holds it
  EXPECT_TRUE(parse_ordered_json("[1e400]", /*allow_exceptions=*/false).is_discarded());
}

// A 2 MB object of 160,000 keys: nlohmann::ordered_json::parse took about 45 s (a linear search per key).
TEST(OrderedJsonParserTest, ObjectWithManyKeysParsesInLinearTime) {
  constexpr int kNumKeys = 160'000;
  const std::string text = object_of_keys(kNumKeys);
  const auto start = std::chrono::steady_clock::now();
  const Json parsed = parse_ordered_json(text);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_EQ(parsed.size(), static_cast<size_t>(kNumKeys));
  EXPECT_EQ(parsed.begin().key(), "0");
  EXPECT_EQ((--parsed.end()).key(), std::to_string(kNumKeys - 1));
  EXPECT_LT(seconds, 2.0) << "parsing " << text.size() << " bytes of " << kNumKeys << " keys";
}

}  // namespace
}  // namespace tern
