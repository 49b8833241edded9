// The per-node token classification (shared wide-region walks plus per-node exits) against a brute-force
// reference: every token stepped byte by byte from the node alone, on a sample of a real vocabulary.
#include <gtest/gtest.h>

#include <set>

#include "grammar/compiled_grammar.h"
#include "grammar/wide_region.h"
#include "test_vocabulary.h"

namespace tern::grammar {
namespace {

// Every 16th token of Qwen3, plus every token with a quote, a backslash or more than 12 bytes: the tokens that
// leave string contents or cross the region depth cut, where the shared walk hands over to the per-node exits.
std::shared_ptr<const TokenVocabulary> sampled_vocabulary() {
  auto full = testing::load_byte_level_vocabulary("qwen3");
  std::vector<std::string> bytes;
  for (size_t id = 0; id < full->size(); ++id) {
    const std::string& token = full->bytes(static_cast<int32_t>(id));
    bool interesting = token.find_first_of("\"\\") != std::string::npos || token.size() > 12;
    if (!full->is_eos(static_cast<int32_t>(id)) && (id % 16 == 0 || interesting)) bytes.push_back(token);
  }
  bytes.push_back("");
  int32_t eos = static_cast<int32_t>(bytes.size() - 1);
  return std::make_shared<const TokenVocabulary>(std::move(bytes), std::vector<int32_t>{eos});
}

struct Classification {
  std::set<int32_t> accepted;
  std::set<uint32_t> uncertain;  // sorted indices
};

// Steps each token from the node alone (an open frame below it): accepted if some stack survives every byte;
// uncertain if it dies after some path left the node's rule (then the real callers decide).
Classification reference(const PushdownAutomaton& pda, const TokenVocabulary& vocabulary, uint32_t node) {
  Classification out;
  PdaStepper stepper(pda);
  for (size_t i = 0; i < vocabulary.num_sorted(); ++i) {
    FramePool pool;
    std::vector<Stack> states{{node, kOpenFrame}}, next;
    bool left_rule = false, alive = true;
    for (char c : vocabulary.sorted_bytes(i)) {
      StepResult r = stepper.step(pool, states, static_cast<uint8_t>(c), next);
      if (!r.alive) {
        alive = false;
        break;
      }
      left_rule = left_rule || r.reached_open;
      std::swap(states, next);
    }
    if (alive) {
      out.accepted.insert(vocabulary.sorted_id(i));
    } else if (left_rule) {
      out.uncertain.insert(static_cast<uint32_t>(i));
    }
  }
  return out;
}

Classification computed(const NodeTokenMask& mask, const TokenVocabulary& vocabulary) {
  Classification out;
  for (size_t id = 0; id < vocabulary.size(); ++id) {
    if (mask.accepted_bitmask && (((*mask.accepted_bitmask)[id / 32] >> (id % 32)) & 1u)) {
      out.accepted.insert(static_cast<int32_t>(id));
    }
  }
  out.accepted.insert(mask.accepted_ids.begin(), mask.accepted_ids.end());
  EXPECT_TRUE(std::is_sorted(mask.uncertain.begin(), mask.uncertain.end()));
  out.uncertain.insert(mask.uncertain.begin(), mask.uncertain.end());
  return out;
}

void expect_every_node_matches_reference(GrammarKind kind, std::string_view source, size_t min_wide_nodes) {
  auto vocabulary = sampled_vocabulary();
  auto grammar = CompiledGrammar::compile(kind, source, vocabulary);
  const PushdownAutomaton& pda = grammar->pda();
  size_t wide_nodes = 0;
  WideRegionExtractor extractor(pda);
  for (uint32_t node = 0; node < pda.nodes.size(); ++node) {
    if (!pda.scannable(node)) continue;
    if (extractor.extract(node)) ++wide_nodes;
    Classification want = reference(pda, *vocabulary, node);
    Classification got = computed(grammar->token_masks().at(node), *vocabulary);
    ASSERT_EQ(got.accepted, want.accepted) << "node " << node;
    ASSERT_EQ(got.uncertain, want.uncertain) << "node " << node;
  }
  // The grammar exercises the shared walks, not only the direct classification.
  EXPECT_GE(wide_nodes, min_wide_nodes);
}

TEST(TokenMaskCache, SchemaStringsLoopsAndBoundedLengthsMatchReference) {
  const char* schema = R"({"type": "object", "properties": {
      "a": {"type": "string"}, "b": {"type": "string", "maxLength": 24},
      "c": {"type": "array", "items": {"type": "string"}},
      "d": {"type": "string", "pattern": "^[a-z ]+$"}, "e": {"type": "integer"}},
    "required": ["a", "b", "c", "d"]})";
  expect_every_node_matches_reference(GrammarKind::kJsonSchema, schema, 24);
}

TEST(TokenMaskCache, RecursiveJsonObjectMatchesReference) {
  // Strings inside recursive rules: exits enter accepting nodes, so continuations leave the rule (uncertain).
  expect_every_node_matches_reference(GrammarKind::kJsonObject, "", 1);
}

TEST(TokenMaskCache, RegexFreeTextClassesMatchReference) {
  expect_every_node_matches_reference(GrammarKind::kRegex, R"((?:[A-Z][a-z]+ ){1,3}\d{1,5}, [A-Za-z .]+, [A-Z]{2})", 2);
}

}  // namespace
}  // namespace tern::grammar
