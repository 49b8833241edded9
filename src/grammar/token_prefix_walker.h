#pragma once
// Matches tokens (in sorted order) against a start set of stacks, reusing the states of the common prefix with the
// previous token: in a sorted vocabulary consecutive tokens share most of their bytes, so each byte of the trie of
// tokens is stepped once rather than once per token.
#include <string_view>
#include <vector>

#include "grammar/pda_stepper.h"
#include "grammar/token_vocabulary.h"

namespace tern::grammar {

struct TokenMatch {
  bool accepted = false;
  // When rejected: every token that starts with the same first dead_prefix_len bytes is rejected the same way.
  size_t dead_prefix_len = 0;
  // When rejected: some path left the start node's rule (an open frame) before the token died, so the verdict
  // depends on the callers below it.
  bool left_rule = false;
};

class TokenPrefixWalker {
 public:
  explicit TokenPrefixWalker(const PushdownAutomaton& pda) : stepper_(pda) {}

  // left_rule: the start stacks were reached by leaving the rule already (a walk resumed after some bytes).
  void reset(std::vector<Stack> start, bool left_rule = false);
  // The token's bytes must stay alive until the next match or reset (prefix reuse compares against them).
  TokenMatch match(FramePool& pool, std::string_view token);

 private:
  PdaStepper stepper_;
  std::vector<std::vector<Stack>> states_;  // states_[d]: stacks after the first d bytes of the previous token
  std::vector<bool> alive_;                 // alive_[d]: byte d-1 could be consumed
  std::vector<bool> left_rule_;             // left_rule_[d]: some path left the rule within the first d bytes
  std::string_view previous_;
  size_t computed_ = 0;                     // states_[0..computed_] describe previous_'s prefix
};

}  // namespace tern::grammar
