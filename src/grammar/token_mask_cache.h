#pragma once
// Per-node token classification computed once per compiled grammar (the "adaptive token mask" of xgrammar): for every
// PDA node with byte edges, which tokens are accepted whatever the stack below is, which are rejected whatever it
// is, and which (usually few) depend on it and must be checked against the real stack at run time.
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "grammar/pushdown_automaton.h"
#include "grammar/region_walk_cache.h"
#include "grammar/token_vocabulary.h"

namespace tern::grammar {

struct NodeTokenMask {
  // Accepted tokens: the union of a bitmask over token ids (null unless many are accepted; shared by the nodes of
  // one region shape) and a list of ids.
  std::shared_ptr<const std::vector<uint32_t>> accepted_bitmask;
  std::vector<int32_t> accepted_ids;
  // Sorted-vocabulary indices (ascending) of the tokens that depend on the stack.
  std::vector<uint32_t> uncertain;
};

class TokenMaskCache {
 public:
  // Classifies the nodes with a wide region (see wide_region.h) now, one shared walk per region shape, on up to
  // num_threads threads. The other nodes are classified now with precompute_all, else the first time a matcher
  // reaches one (thread-safe): their tokens die within a byte or two, so a first visit is cheap, and compiles of
  // large grammars stay cheap.
  // region_walks (optional) shares region walks with other grammars of the same vocabulary.
  TokenMaskCache(const PushdownAutomaton& pda, const TokenVocabulary& vocabulary, bool precompute_all,
                 unsigned num_threads, RegionWalkCache* region_walks);

  const NodeTokenMask& at(uint32_t node) const;
  // Bytes held by the nodes classified so far (a bitmask shared by several nodes of a region counts once); safe to
  // call while matchers classify nodes, so a cache can account for a grammar that grows in use.
  size_t memory_bytes() const { return memory_bytes_.load(std::memory_order_relaxed); }
  // Statistics over the nodes classified so far; call when no matcher is computing masks.
  size_t num_uncertain() const;

 private:
  const PushdownAutomaton& pda_;
  const TokenVocabulary& vocabulary_;
  std::unique_ptr<std::once_flag[]> classified_;
  mutable std::vector<NodeTokenMask> masks_;  // indexed by node; each written once, under its once_flag
  mutable std::atomic<size_t> memory_bytes_{0};
};

}  // namespace tern::grammar
