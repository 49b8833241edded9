// Region shapes: string contents that recur in a grammar cut out to the same shape.
#include <gtest/gtest.h>

#include <map>

#include "grammar/compiled_grammar.h"
#include "grammar/wide_region.h"
#include "test_vocabulary.h"

namespace tern::grammar {
namespace {

// Regions of equal shape are one walk: the two unbounded strings of a schema share theirs, and positions of a
// bounded string far from its end look alike.
TEST(WideRegion, EqualShapesForRepeatedStringContents) {
  auto vocabulary = testing::tiny_vocabulary();
  auto grammar = CompiledGrammar::compile(
      GrammarKind::kJsonSchema,
      R"({"type": "object", "properties": {"x": {"type": "string"}, "yy": {"type": "string"},
          "z": {"type": "string", "maxLength": 60}}, "required": ["x", "yy", "z"]})",
      vocabulary);
  const PushdownAutomaton& pda = grammar->pda();
  std::map<std::vector<uint32_t>, size_t> nodes_per_shape;
  size_t wide_nodes = 0;
  WideRegionExtractor extractor(pda);
  for (uint32_t node = 0; node < pda.nodes.size(); ++node) {
    if (auto region = extractor.extract(node)) {
      ++nodes_per_shape[region->shape];
      ++wide_nodes;
    }
  }
  // 60 positions of z (and their UTF-8 continuation nodes) plus two loops, in far fewer shapes.
  EXPECT_GE(wide_nodes, 62u);
  EXPECT_LT(nodes_per_shape.size() * 2, wide_nodes);
  size_t largest = 0;
  for (const auto& [shape, count] : nodes_per_shape) largest = std::max(largest, count);
  EXPECT_GE(largest, 2u);
}

}  // namespace
}  // namespace tern::grammar
