#include "gateway/prefix_tree.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace tern::gateway {
namespace {

// The reference: the longest common prefix of `text` with any string still remembered.
size_t brute_force_match(const std::vector<std::string>& texts, const std::string& text) {
  size_t best = 0;
  for (const std::string& t : texts) {
    size_t len = 0;
    while (len < t.size() && len < text.size() && t[len] == text[len]) ++len;
    best = std::max(best, len);
  }
  return best;
}

TEST(PrefixTree, MatchesLongestPrefixAcrossSplits) {
  PrefixTree tree(1 << 20);
  EXPECT_EQ(tree.match("anything"), 0u);
  tree.insert("hello world");
  EXPECT_EQ(tree.match("hello world"), 11u);
  EXPECT_EQ(tree.match("hello there"), 6u);
  EXPECT_EQ(tree.match("help"), 3u);
  tree.insert("hello there");  // splits the edge after "hello "
  EXPECT_EQ(tree.match("hello there, again"), 11u);
  EXPECT_EQ(tree.match("hello world"), 11u);
  EXPECT_EQ(tree.num_chars(), std::string("hello world").size() + std::string("there").size());
  tree.insert("hello");  // a prefix of what is there adds nothing
  EXPECT_EQ(tree.num_chars(), 16u);
}

TEST(PrefixTree, AgreesWithBruteForceOnRandomTexts) {
  std::mt19937 rng(7);
  auto random_text = [&](size_t max_len) {
    std::string s(rng() % max_len, 'a');
    for (char& c : s) c = static_cast<char>('a' + rng() % 3);  // a small alphabet makes shared prefixes common
    return s;
  };
  PrefixTree tree(1 << 20);
  std::vector<std::string> inserted;
  for (int i = 0; i < 300; ++i) {
    const std::string text = random_text(40);
    EXPECT_EQ(tree.match(text), brute_force_match(inserted, text)) << "query " << i << ": " << text;
    tree.insert(text);
    inserted.push_back(text);
  }
}

TEST(PrefixTree, EvictsLeastRecentlyUsedBeyondItsBound) {
  const std::string a(100, 'a'), b(100, 'b'), c(100, 'c');
  PrefixTree tree(250);
  tree.insert(a);
  tree.insert(b);
  EXPECT_EQ(tree.match(a), 100u);  // a is now more recent than b
  tree.insert(c);                  // 300 > 250: the oldest, b, goes
  EXPECT_LE(tree.num_chars(), 250u);
  EXPECT_EQ(tree.match(b), 0u);
  EXPECT_EQ(tree.match(a), 100u);
  EXPECT_EQ(tree.match(c), 100u);
}

TEST(PrefixTree, EvictionKeepsSharedPrefixesOfRecentTexts) {
  const std::string shared(80, 's');
  PrefixTree tree(100);
  tree.insert(shared + "old-suffix-1");
  tree.insert(shared + "new-suffix-2");  // 80 shared + 12 + 12 bytes
  tree.insert(shared + "new-suffix-3");  // + 1 + 1 (the split): over the bound, the old suffix goes, the stem stays
  EXPECT_EQ(tree.num_chars(), 80u + 11 + 1 + 1);
  EXPECT_EQ(tree.match(shared + "new-suffix-3"), shared.size() + 12);
  EXPECT_EQ(tree.match(shared + "old-suffix-1"), shared.size());
}

}  // namespace
}  // namespace tern::gateway
