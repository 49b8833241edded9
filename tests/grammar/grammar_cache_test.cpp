// The grammar cache's bounds with the real compile path: 1,000 distinct schemas served one after another (each
// compiled, then used by a matcher so its token masks grow) stay under a small byte budget, by LRU eviction.
#include "grammar/grammar_cache.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "grammar/grammar_matcher.h"
#include "test_vocabulary.h"

namespace tern::grammar {
namespace {

std::string distinct_schema(int i) {
  return fmt::format(R"({{"type": "object", "properties": {{"name_{}": {{"type": "string", "maxLength": {}}},
                         "count": {{"type": "integer", "minimum": {}, "maximum": {}}}}}, "required": ["name_{}"]}})",
                     i, 5 + i % 7, -i, 1000 + i, i);
}

TEST(GrammarCache, ThousandDistinctSchemasStayUnderTheByteBudget) {
  constexpr size_t kBudget = 2 << 20;
  GrammarCache cache(testing::load_byte_level_vocabulary("qwen3"), 256, {}, kBudget);
  size_t largest_grammar = 0;
  for (int i = 0; i < 1000; ++i) {
    auto grammar = cache.get(GrammarKind::kJsonSchema, distinct_schema(i));
    GrammarMatcher matcher(grammar);
    ASSERT_TRUE(matcher.accept_bytes(fmt::format(R"({{"name_{}":"ab","count":)", i)));
    matcher.next_token_bitmask();  // classifies nodes on first use: the grammar grows
    largest_grammar = std::max(largest_grammar, grammar->memory_bytes());
    // A grammar that grew since the last get may put the cache over until the next one measures it.
    ASSERT_LE(cache.memory_bytes(), kBudget + largest_grammar) << "after schema " << i;
  }
  cache.get(GrammarKind::kJsonSchema, distinct_schema(0));
  EXPECT_LE(cache.memory_bytes(), kBudget);
  EXPECT_GT(cache.num_evictions(), 900u);
  EXPECT_LT(cache.size(), 256u);  // the byte budget, not the entry bound, is what evicted
  EXPECT_GT(largest_grammar, 0u);
}

TEST(GrammarCache, EvictsTheLeastRecentlyUsed) {
  GrammarCache cache(testing::tiny_vocabulary(), 2);
  auto a = cache.get(GrammarKind::kRegex, "a");
  cache.get(GrammarKind::kRegex, "b");
  EXPECT_EQ(cache.get(GrammarKind::kRegex, "a"), a);  // a hit: now the most recent
  cache.get(GrammarKind::kRegex, "c");                // evicts b
  EXPECT_EQ(cache.num_evictions(), 1u);
  EXPECT_EQ(cache.get(GrammarKind::kRegex, "a"), a);
  size_t misses = cache.num_misses();
  cache.get(GrammarKind::kRegex, "b");
  EXPECT_EQ(cache.num_misses(), misses + 1);
}

}  // namespace
}  // namespace tern::grammar
