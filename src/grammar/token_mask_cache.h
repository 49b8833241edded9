#pragma once
// Per-node token classification computed once per compiled grammar (the "adaptive token mask" of xgrammar): for every
// PDA node with byte edges, which tokens are accepted whatever the stack below is, which are rejected whatever it
// is, and which (usually few) depend on it and must be checked against the real stack at run time.
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "grammar/pushdown_automaton.h"
#include "grammar/token_vocabulary.h"

namespace tern::grammar {

struct NodeTokenMask {
  // Accepted tokens: a bitmask over token ids when many, else a list of ids (whichever is smaller).
  std::vector<uint32_t> accepted_bitmask;
  std::vector<int32_t> accepted_ids;
  // Sorted-vocabulary indices (ascending) of the tokens that depend on the stack.
  std::vector<uint32_t> uncertain;
};

class TokenMaskCache {
 public:
  // With precompute_all, classifies every scannable node now (on up to num_threads threads); otherwise each node
  // is classified the first time a matcher reaches it (thread-safe), which keeps compiles of large grammars cheap.
  TokenMaskCache(const PushdownAutomaton& pda, const TokenVocabulary& vocabulary, bool precompute_all,
                 unsigned num_threads);

  const NodeTokenMask& at(uint32_t node) const;
  // Statistics over the nodes classified so far; call when no matcher is computing masks.
  size_t memory_bytes() const;
  size_t num_uncertain() const;

 private:
  const PushdownAutomaton& pda_;
  const TokenVocabulary& vocabulary_;
  std::unique_ptr<std::once_flag[]> classified_;
  mutable std::vector<NodeTokenMask> masks_;  // indexed by node; each written once, under its once_flag
};

}  // namespace tern::grammar
