#pragma once
// Running the pushdown automaton over bytes. The matcher's state is a set of stacks; the stacks share their frames
// (a graph-structured stack), and frames are interned so that equal stacks are equal ids and the set stays small
// even for ambiguous grammars.
#include <cstdint>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "grammar/pushdown_automaton.h"

namespace tern::grammar {

// A frame is a return point (the caller's node after the call) and the frame below it.
struct Frame {
  uint32_t return_node = 0;
  uint32_t parent = 0;
};

inline constexpr uint32_t kBottomFrame = 0;  // nothing below: the root rule; popping here may end the grammar
inline constexpr uint32_t kOpenFrame = 1;    // caller unknown (token precomputation): popping here leaves the rule

// One stack: the current node (which has byte edges) and the frame id of the callers below it.
struct Stack {
  uint32_t node = 0;
  uint32_t frame = 0;
  bool operator==(const Stack&) const = default;
};

class FramePool {
 public:
  FramePool() : frames_{{0, 0}, {0, 0}} {}
  uint32_t intern(uint32_t return_node, uint32_t parent);
  const Frame& operator[](uint32_t id) const { return frames_[id]; }
  size_t size() const { return frames_.size(); }
  // Forgets the frames created after the pool had `size` frames (rollback, scratch work).
  void truncate(size_t size);

 private:
  static uint64_t key(uint32_t return_node, uint32_t parent) { return (uint64_t{return_node} << 32) | parent; }
  std::vector<Frame> frames_;
  std::unordered_map<uint64_t, uint32_t> ids_;
};

struct StepResult {
  bool alive = false;          // some stack could consume the byte
  bool reached_bottom = false; // the grammar may end after it
  bool reached_open = false;   // some path left the rule under an open frame
};

// Scratch buffers for stepping; one per thread of work, never shared.
class PdaStepper {
 public:
  explicit PdaStepper(const PushdownAutomaton& pda) : pda_(pda) {}

  // The scannable stacks reachable from (node, frame) without consuming bytes, appended to `out`.
  void closure(FramePool& pool, Stack start, std::vector<Stack>& out, StepResult& result);
  // Advances every stack in `in` by one byte; `out` receives the closed-over successors.
  StepResult step(FramePool& pool, const std::vector<Stack>& in, uint8_t byte, std::vector<Stack>& out);

 private:
  void begin() {
    visited_.clear();
    visited_hash_.clear();
  }
  bool first_visit(Stack s);
  void close_over(FramePool& pool, Stack start, std::vector<Stack>& out, StepResult& result);

  const PushdownAutomaton& pda_;
  std::vector<Stack> work_;
  std::vector<Stack> visited_;
  std::unordered_set<uint64_t> visited_hash_;
};

}  // namespace tern::grammar
