#pragma once
// The part of the automaton around a node that accepts almost any byte (string contents, free-text regex classes),
// cut out so that its token classification can be shared. Classifying such a node walks nearly the whole
// vocabulary, and JSON schemas repeat the same string-content automaton once per string property (non-recursive
// rules are inlined). The walk inside the region depends only on the region's shape, so nodes whose regions have
// the same shape share one walk; only the few tokens that leave the region (a closing quote, an escape, a token
// longer than the region is deep) are continued from the node's own exit.
//
// This is xgrammar's idea of computing a mask once per grammar position and reusing it wherever the same rule
// appears (mlc-ai/xgrammar, cpp/grammar_compiler.cc: the adaptive token mask cache is per rule position, and JSON
// strings are one rule), applied to an automaton whose string rules were inlined.
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "grammar/pushdown_automaton.h"
#include "grammar/token_vocabulary.h"

namespace tern::grammar {

struct WideRegion {
  // The region's shape, equal for regions that walk tokens alike: for each region node in breadth-first order from
  // the start node, its number of byte edges, then per edge (lo | hi << 8) and the target (a region node's index,
  // or kRegionExit | exit index for an edge leaving the region).
  std::vector<uint32_t> shape;
  // Exit index -> the PDA node an edge leaving the region enters (numbered in order of first appearance).
  std::vector<uint32_t> exit_nodes;
};

inline constexpr uint32_t kRegionExit = 0x80000000u;

// Cuts regions out of one automaton; keeps per-node facts and scratch space between calls (one per thread).
class WideRegionExtractor {
 public:
  explicit WideRegionExtractor(const PushdownAutomaton& pda);
  // The region around `node` when the node is broad and most of its bytes stay among broad and gate nodes (see the
  // .cpp; all of them plain: no calls, not accepting, so no path inside the region depends on the stack); nullopt
  // otherwise.
  std::optional<WideRegion> extract(uint32_t node);

 private:
  const PushdownAutomaton& pda_;
  std::vector<uint8_t> kind_;      // per node: kOther, kBroad or kGate (see the .cpp)
  std::vector<uint32_t> mark_;     // per node: extraction number that last gave it a region index or an exit index
  std::vector<uint32_t> index_;    // per node: that index (kRegionExit set for exits)
  uint32_t extraction_ = 0;
};

struct RegionExit {
  uint32_t sorted_index = 0;  // the token
  uint32_t consumed = 0;      // bytes of it consumed up to and including the byte that left the region
  uint32_t exit = 0;          // exit index
};

// The vocabulary walked from a region's start node, by shape alone.
struct RegionTokenWalk {
  // The tokens that end inside the region: ids when few, else a bitmask over ids (then `accepted` is empty).
  std::vector<int32_t> accepted;
  std::shared_ptr<const std::vector<uint32_t>> accepted_bitmask;
  std::vector<RegionExit> exits;  // tokens that leave the region, ordered by (exit, sorted_index)
  // Every other token dies inside the region, whatever the stack: rejected.
};

RegionTokenWalk walk_wide_region(const std::vector<uint32_t>& shape, const TokenVocabulary& vocabulary);

}  // namespace tern::grammar
