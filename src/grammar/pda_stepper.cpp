#include "grammar/pda_stepper.h"

namespace tern::grammar {

uint32_t FramePool::intern(uint32_t return_node, uint32_t parent) {
  auto [it, inserted] = ids_.emplace(key(return_node, parent), static_cast<uint32_t>(frames_.size()));
  if (inserted) frames_.push_back({return_node, parent});
  return it->second;
}

void FramePool::truncate(size_t size) {
  for (size_t id = size; id < frames_.size(); ++id) ids_.erase(key(frames_[id].return_node, frames_[id].parent));
  frames_.resize(std::max<size_t>(size, 2));
}

bool PdaStepper::first_visit(Stack s) {
  // Small sets are the rule; switch to hashing only when a step fans out widely.
  constexpr size_t kLinearLimit = 32;
  uint64_t key = (uint64_t{s.node} << 32) | s.frame;
  if (visited_.size() < kLinearLimit) {
    for (const Stack& v : visited_) {
      if (v == s) return false;
    }
    visited_.push_back(s);
    if (visited_.size() == kLinearLimit) {
      for (const Stack& v : visited_) visited_hash_.insert((uint64_t{v.node} << 32) | v.frame);
    }
    return true;
  }
  return visited_hash_.insert(key).second;
}

void PdaStepper::close_over(FramePool& pool, Stack start, std::vector<Stack>& out, StepResult& result) {
  work_.clear();
  work_.push_back(start);
  while (!work_.empty()) {
    Stack s = work_.back();
    work_.pop_back();
    if (!first_visit(s)) continue;
    const PdaNode& node = pda_.nodes[s.node];
    if (node.num_byte_edges != 0) out.push_back(s);
    for (uint32_t i = 0; i < node.num_call_edges; ++i) {
      const CallEdge& call = pda_.call_edges[node.first_call_edge + i];
      work_.push_back({pda_.rule_start[call.rule], pool.intern(call.return_node, s.frame)});
    }
    if (node.accepting) {
      if (s.frame == kBottomFrame) {
        result.reached_bottom = true;
      } else if (s.frame == kOpenFrame) {
        result.reached_open = true;
      } else {
        const Frame& frame = pool[s.frame];
        work_.push_back({frame.return_node, frame.parent});
      }
    }
  }
}

void PdaStepper::closure(FramePool& pool, Stack start, std::vector<Stack>& out, StepResult& result) {
  begin();
  close_over(pool, start, out, result);
}

StepResult PdaStepper::step(FramePool& pool, const std::vector<Stack>& in, uint8_t byte, std::vector<Stack>& out) {
  StepResult result;
  out.clear();
  begin();
  for (const Stack& s : in) {
    uint32_t target = pda_.next(s.node, byte);
    if (target == kNoNode) continue;
    result.alive = true;
    close_over(pool, {target, s.frame}, out, result);
  }
  return result;
}

}  // namespace tern::grammar
