#include "grammar/token_prefix_walker.h"

#include <algorithm>

namespace tern::grammar {

void TokenPrefixWalker::reset(std::vector<Stack> start, bool left_rule) {
  if (states_.empty()) states_.resize(1);
  states_[0] = std::move(start);
  alive_.assign(1, true);
  left_rule_.assign(1, left_rule);
  previous_ = {};
  computed_ = 0;
}

TokenMatch TokenPrefixWalker::match(FramePool& pool, std::string_view token) {
  size_t len = token.size();
  size_t depth = 0;
  size_t limit = std::min({computed_, len, previous_.size()});
  while (depth < limit && previous_[depth] == token[depth]) ++depth;
  if (states_.size() < len + 1) states_.resize(len + 1);
  if (alive_.size() < len + 1) {
    alive_.resize(len + 1);
    left_rule_.resize(len + 1);
  }
  while (depth < len && alive_[depth]) {
    StepResult r = stepper_.step(pool, states_[depth], static_cast<uint8_t>(token[depth]), states_[depth + 1]);
    alive_[depth + 1] = r.alive;
    left_rule_[depth + 1] = left_rule_[depth] || r.reached_open;
    ++depth;
  }
  previous_ = token;
  computed_ = depth;
  TokenMatch m;
  if (depth == len && alive_[len]) {
    m.accepted = true;
    return m;
  }
  // alive_[depth] is false: byte depth-1 could not be consumed after the first depth-1 bytes.
  m.dead_prefix_len = depth;
  m.left_rule = left_rule_[depth - 1];
  return m;
}

}  // namespace tern::grammar
