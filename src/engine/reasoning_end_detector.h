#pragma once
// Watches a sequence's output token ids for the marker that ends its reasoning section (SamplingParams::
// constraint_after), as vLLM's reasoning parsers' is_reasoning_end does on the generated ids
// (vllm/reasoning/basic_parsers.py for </think>, gptoss_reasoning_parser.py for harmony's
// <|channel|>final ... <|message|>). Once it has seen the marker it stays ended.
#include <cstdint>
#include <deque>
#include <vector>

#include "engine/sampling_params.h"

namespace tern {

class ReasoningEndDetector {
 public:
  explicit ReasoningEndDetector(ReasoningEndMarker marker);

  // Feeds the next output token; true once the marker is complete (with this token or an earlier one).
  bool feed(int32_t token_id);
  bool ended() const { return ended_; }

 private:
  // True when the recent tokens end with the whole marker.
  bool recent_end_with_marker() const;
  bool recent_end_with(const std::vector<int32_t>& part, size_t tokens_after) const;

  ReasoningEndMarker marker_;
  size_t window_len_;          // the most tokens one marker spans
  std::deque<int32_t> recent_;  // the last window_len_ output tokens
  bool ended_ = false;
};

}  // namespace tern
