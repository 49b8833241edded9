#pragma once
// The byte-level pushdown automaton a grammar compiles to. Every rule that stays a rule (the root, recursive rules
// and rules too large to inline) is a DFA over bytes whose edges may also "call" another rule: push the return node,
// run the callee from its start node, pop back when the callee reaches an accepting node. Non-recursive rules are
// inlined into their callers, so most JSON schemas compile to a single DFA and every token is context-independent.
#include <cstdint>
#include <string>
#include <vector>

#include "grammar/grammar_expr.h"

namespace tern::grammar {

inline constexpr uint32_t kNoNode = UINT32_MAX;
inline constexpr uint32_t kUnreachable = UINT32_MAX;

struct ByteEdge {
  uint8_t lo = 0;  // inclusive byte range
  uint8_t hi = 0;
  uint32_t target = 0;
};

struct CallEdge {
  uint32_t rule = 0;         // callee PDA rule
  uint32_t return_node = 0;  // where the caller continues after the callee ends
};

struct PdaNode {
  uint32_t first_byte_edge = 0;
  uint32_t num_byte_edges = 0;  // edges sorted by byte, disjoint
  uint32_t first_call_edge = 0;
  uint32_t num_call_edges = 0;
  uint32_t rule = 0;
  bool accepting = false;  // the node's rule may end here
  // Fewest bytes from here to the end of this node's rule (callees at their shortest).
  uint32_t min_bytes_to_rule_end = kUnreachable;
};

struct PushdownAutomaton {
  std::vector<PdaNode> nodes;
  std::vector<ByteEdge> byte_edges;
  std::vector<CallEdge> call_edges;
  std::vector<uint32_t> rule_start;  // PDA rule -> start node
  std::vector<std::string> rule_names;
  uint32_t root_rule = 0;

  uint32_t next(uint32_t node, uint8_t byte) const {
    const PdaNode& n = nodes[node];
    const ByteEdge* edges = byte_edges.data() + n.first_byte_edge;
    for (uint32_t i = 0; i < n.num_byte_edges; ++i) {
      if (byte < edges[i].lo) return kNoNode;
      if (byte <= edges[i].hi) return edges[i].target;
    }
    return kNoNode;
  }
  bool scannable(uint32_t node) const { return nodes[node].num_byte_edges != 0; }
};

struct PdaLimits {
  size_t max_nfa_states = 2'000'000;
  size_t max_dfa_states = 500'000;
  size_t inline_rule_max_states = 20'000;  // rules larger than this (after expansion) stay called
  size_t rule_max_states = 100'000;        // a rule whose expansion passes this calls its largest callees instead
};

// Throws tern::Error for left recursion, grammars that match nothing, or automata over the limits.
PushdownAutomaton build_pushdown_automaton(const Grammar& grammar, const PdaLimits& limits = {});

}  // namespace tern::grammar
