#pragma once
// Follows one output through a compiled grammar: accepts tokens, rolls them back, and computes the bitmask of the
// tokens allowed next. Each matcher owns its state; the compiled grammar is shared and immutable, so the masks of
// many requests can be computed concurrently (e.g. for step N+1 while the device runs step N).
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "grammar/compiled_grammar.h"
#include "grammar/pda_stepper.h"
#include "grammar/token_prefix_walker.h"

namespace tern::grammar {

class GrammarMatcher {
 public:
  // max_rollback_tokens bounds the history kept for rollback().
  explicit GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar, size_t max_rollback_tokens = 64);

  // Advances by the token's bytes (or terminates on EOS); returns false and changes nothing if it is not allowed.
  bool accept_token(int32_t token_id);
  // Advances by raw bytes (prompt prefill of a forced prefix, tests); false and unchanged if not allowed.
  bool accept_bytes(std::string_view bytes);
  // Undoes the last num_tokens accepted tokens (speculative decoding); throws if fewer are remembered.
  void rollback(size_t num_tokens);
  void reset();

  // Writes the allowed next tokens as bits (bit id%32 of word id/32) into bitmask (vocabulary().bitmask_words()
  // words). EOS is allowed exactly when the grammar can end here; after termination nothing is allowed.
  void fill_next_token_bitmask(std::span<uint32_t> bitmask);
  std::vector<uint32_t> next_token_bitmask();

  bool is_accepting() const { return state().accepting; }    // EOS would be accepted now
  bool is_terminated() const { return state().terminated; }  // EOS was accepted
  // Fewest bytes that would complete the output from here (0 when accepting).
  uint32_t min_bytes_to_accept() const;
  size_t num_rollback_tokens() const { return history_.size() - 1; }
  const CompiledGrammar& grammar() const { return *grammar_; }

 private:
  struct State {
    std::vector<Stack> stacks;  // scannable stacks
    bool accepting = false;
    bool terminated = false;
    size_t frames_size = 2;     // pool size when this state was made, for rollback
  };
  const State& state() const { return history_.back(); }
  bool advance(std::string_view bytes, State& next);
  void push_state(State next);

  std::shared_ptr<const CompiledGrammar> grammar_;
  size_t max_history_;
  FramePool frames_;
  PdaStepper stepper_;
  TokenPrefixWalker walker_;
  std::vector<State> history_;  // back() is the current state
  std::vector<Stack> scratch_a_, scratch_b_;
};

inline bool bitmask_test(std::span<const uint32_t> bitmask, int32_t id) {
  return (bitmask[static_cast<size_t>(id) / 32] >> (id % 32)) & 1u;
}

}  // namespace tern::grammar
