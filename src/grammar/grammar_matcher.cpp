#include "grammar/grammar_matcher.h"

#include <algorithm>

#include "core/error.h"

namespace tern::grammar {

GrammarMatcher::GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar, size_t max_rollback_tokens)
    : grammar_(std::move(grammar)), max_history_(max_rollback_tokens + 1), stepper_(grammar_->pda()),
      walker_(grammar_->pda()) {
  reset();
}

void GrammarMatcher::reset() {
  frames_.truncate(2);
  const PushdownAutomaton& pda = grammar_->pda();
  State initial;
  StepResult result;
  stepper_.closure(frames_, {pda.rule_start[pda.root_rule], kBottomFrame}, initial.stacks, result);
  initial.accepting = result.reached_bottom;
  initial.frames_size = frames_.size();
  history_.clear();
  history_.push_back(std::move(initial));
}

bool GrammarMatcher::advance(std::string_view bytes, State& next) {
  scratch_a_ = state().stacks;
  bool accepting = state().accepting;
  for (char c : bytes) {
    StepResult r = stepper_.step(frames_, scratch_a_, static_cast<uint8_t>(c), scratch_b_);
    if (!r.alive) return false;
    accepting = r.reached_bottom;
    std::swap(scratch_a_, scratch_b_);
  }
  next.stacks = scratch_a_;
  next.accepting = accepting;
  return true;
}

void GrammarMatcher::push_state(State next) {
  next.frames_size = frames_.size();
  history_.push_back(std::move(next));
  if (history_.size() > max_history_) history_.erase(history_.begin());
}

bool GrammarMatcher::accept_token(int32_t token_id) {
  const TokenVocabulary& vocabulary = grammar_->vocabulary();
  if (is_terminated() || token_id < 0 || static_cast<size_t>(token_id) >= vocabulary.size()) return false;
  if (vocabulary.is_eos(token_id)) {
    if (!is_accepting()) return false;
    State next = state();
    next.stacks.clear();
    next.terminated = true;
    push_state(std::move(next));
    return true;
  }
  const std::string& bytes = vocabulary.bytes(token_id);
  if (bytes.empty()) return false;
  return accept_bytes(bytes);
}

bool GrammarMatcher::accept_bytes(std::string_view bytes) {
  if (is_terminated()) return false;
  size_t frames_before = frames_.size();
  State next;
  if (!advance(bytes, next)) {
    frames_.truncate(frames_before);
    return false;
  }
  push_state(std::move(next));
  return true;
}

void GrammarMatcher::rollback(size_t num_tokens) {
  if (num_tokens > num_rollback_tokens()) {
    fail("grammar matcher: cannot roll back {} tokens, only {} are remembered", num_tokens, num_rollback_tokens());
  }
  history_.resize(history_.size() - num_tokens);
  frames_.truncate(state().frames_size);
}

void GrammarMatcher::fill_next_token_bitmask(std::span<uint32_t> bitmask) {
  const TokenVocabulary& vocabulary = grammar_->vocabulary();
  if (bitmask.size() < vocabulary.bitmask_words()) {
    fail("grammar matcher: bitmask has {} words, the vocabulary needs {}", bitmask.size(), vocabulary.bitmask_words());
  }
  std::fill(bitmask.begin(), bitmask.end(), 0u);
  const State& current = state();
  if (current.terminated) return;
  const TokenMaskCache& masks = grammar_->token_masks();

  // Context-independent part: the union of the accepted sets of the distinct nodes.
  std::vector<uint32_t> nodes;
  nodes.reserve(current.stacks.size());
  for (const Stack& s : current.stacks) nodes.push_back(s.node);
  std::sort(nodes.begin(), nodes.end());
  nodes.erase(std::unique(nodes.begin(), nodes.end()), nodes.end());
  for (uint32_t node : nodes) {
    const NodeTokenMask& mask = masks.at(node);
    if (mask.accepted_bitmask) {
      const std::vector<uint32_t>& words = *mask.accepted_bitmask;
      for (size_t w = 0; w < words.size(); ++w) bitmask[w] |= words[w];
    }
    for (int32_t id : mask.accepted_ids) bitmask[static_cast<size_t>(id) / 32] |= 1u << (id % 32);
  }

  // Context-dependent part: check the remaining tokens against each real stack.
  size_t frames_before = frames_.size();
  for (const Stack& s : current.stacks) {
    const std::vector<uint32_t>& uncertain = masks.at(s.node).uncertain;
    if (uncertain.empty()) continue;
    walker_.reset({s});
    for (size_t k = 0; k < uncertain.size();) {
      int32_t id = vocabulary.sorted_id(uncertain[k]);
      if (bitmask_test(bitmask, id)) {
        ++k;
        continue;
      }
      std::string_view token = vocabulary.sorted_bytes(uncertain[k]);
      TokenMatch m = walker_.match(frames_, token);
      ++k;
      if (m.accepted) {
        bitmask[static_cast<size_t>(id) / 32] |= 1u << (id % 32);
        continue;
      }
      // Tokens sharing the dead prefix die the same way.
      std::string_view dead(token.data(), m.dead_prefix_len);
      while (k < uncertain.size() && vocabulary.sorted_bytes(uncertain[k]).substr(0, dead.size()) == dead) ++k;
    }
  }
  frames_.truncate(frames_before);

  if (current.accepting) {
    for (int32_t id : vocabulary.eos_ids()) bitmask[static_cast<size_t>(id) / 32] |= 1u << (id % 32);
  }
}

std::vector<uint32_t> GrammarMatcher::next_token_bitmask() {
  std::vector<uint32_t> bitmask(grammar_->vocabulary().bitmask_words());
  fill_next_token_bitmask(bitmask);
  return bitmask;
}

uint32_t GrammarMatcher::min_bytes_to_accept() const {
  if (is_accepting() || is_terminated()) return 0;
  const PushdownAutomaton& pda = grammar_->pda();
  uint64_t best = kUnreachable;
  for (const Stack& s : state().stacks) {
    uint64_t total = pda.nodes[s.node].min_bytes_to_rule_end;
    for (uint32_t f = s.frame; f != kBottomFrame; f = frames_[f].parent) {
      total += pda.nodes[frames_[f].return_node].min_bytes_to_rule_end;
    }
    best = std::min(best, total);
  }
  return static_cast<uint32_t>(std::min<uint64_t>(best, kUnreachable));
}

}  // namespace tern::grammar
