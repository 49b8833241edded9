// Region walks shared across grammars: reused for a second schema with the same kinds of strings, and the masks
// are those of a compile without sharing.
#include <gtest/gtest.h>

#include <algorithm>

#include "grammar/compiled_grammar.h"
#include "grammar/region_walk_cache.h"
#include "test_vocabulary.h"

namespace tern::grammar {
namespace {

std::vector<std::string> string_tokens() {
  return {"ab", "a\"", "\",", "\"}", "abc\"}", "x\\n", "\xC3\xA9", "\xC3", "\xA9z", "\"xyz\":\"", "0123456789abcdefg"};
}

void expect_same_masks(const CompiledGrammar& a, const CompiledGrammar& b) {
  ASSERT_EQ(a.pda().nodes.size(), b.pda().nodes.size());
  for (uint32_t node = 0; node < a.pda().nodes.size(); ++node) {
    const NodeTokenMask& x = a.token_masks().at(node);
    const NodeTokenMask& y = b.token_masks().at(node);
    std::vector<int32_t> xa = x.accepted_ids, ya = y.accepted_ids;
    std::sort(xa.begin(), xa.end());
    std::sort(ya.begin(), ya.end());
    ASSERT_EQ(x.accepted_bitmask == nullptr, y.accepted_bitmask == nullptr) << "node " << node;
    if (x.accepted_bitmask) {
      EXPECT_EQ(*x.accepted_bitmask, *y.accepted_bitmask) << "node " << node;
    }
    EXPECT_EQ(xa, ya) << "node " << node;
    EXPECT_EQ(x.uncertain, y.uncertain) << "node " << node;
  }
}

TEST(RegionWalkCache, SecondSchemaReusesTheWalksAndMasksMatchAnUnsharedCompile) {
  auto vocabulary = testing::tiny_vocabulary(string_tokens());
  CompileOptions shared;
  shared.region_walks = std::make_shared<RegionWalkCache>(vocabulary->fingerprint());
  const char* first = R"({"type": "object", "properties": {"a": {"type": "string"},
      "b": {"type": "string", "maxLength": 40}}, "required": ["a", "b"]})";
  const char* second = R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 40},
      "note": {"type": "string"}, "city": {"type": "string"}}, "required": ["name", "note"]})";
  CompiledGrammar::compile(GrammarKind::kJsonSchema, first, vocabulary, shared);
  const size_t shapes = shared.region_walks->size();
  EXPECT_GT(shapes, 0u);
  auto with_shared = CompiledGrammar::compile(GrammarKind::kJsonSchema, second, vocabulary, shared);
  EXPECT_EQ(shared.region_walks->size(), shapes);  // nothing new to walk
  auto alone = CompiledGrammar::compile(GrammarKind::kJsonSchema, second, vocabulary);
  expect_same_masks(*with_shared, *alone);
}

TEST(RegionWalkCache, AnotherVocabularyIsWalkedButNotKept) {
  auto vocabulary = testing::tiny_vocabulary(string_tokens());
  auto other = testing::tiny_vocabulary({"zz"});
  CompileOptions shared;
  shared.region_walks = std::make_shared<RegionWalkCache>(vocabulary->fingerprint());
  auto grammar = CompiledGrammar::compile(GrammarKind::kJsonObject, "", other, shared);
  EXPECT_EQ(shared.region_walks->size(), 0u);
  expect_same_masks(*grammar, *CompiledGrammar::compile(GrammarKind::kJsonObject, "", other));
}

}  // namespace
}  // namespace tern::grammar
