#pragma once
// Splits model output into reasoning and content at <think>...</think> (Qwen3, DeepSeek-R1 style), streaming.
// The template may have opened <think> in the prompt already, so the output can start inside reasoning.
// The newlines that chat templates put around the tags ("<think>\n...\n</think>\n\n") are not part of either side.
#include <string>
#include <string_view>

namespace tern::chat {

struct ReasoningDelta {
  std::string reasoning;
  std::string content;
};

struct ReasoningTags {
  std::string start = "<think>";
  std::string end = "</think>";
};

class ReasoningParser {
 public:
  explicit ReasoningParser(bool starts_in_reasoning, ReasoningTags tags = {});

  // Feeds the next piece of output; returns what is now certain. A partial tag at the end is held back.
  ReasoningDelta feed(std::string_view text);
  // The output ended: returns everything still held.
  ReasoningDelta flush();

  // True when the prompt ends inside an open reasoning block (its last start tag is not closed).
  static bool prompt_opens_reasoning(std::string_view prompt, const ReasoningTags& tags = {});

 private:
  enum class State { kBeforeReasoning, kReasoning, kAfterReasoning };

  void process(ReasoningDelta& delta, bool final);
  // Drops newlines at the start of a section; false while the buffer holds nothing else yet.
  bool skip_leading_newlines();

  ReasoningTags tags_;
  State state_;
  std::string buffer_;
  bool skipping_newlines_;
};

}  // namespace tern::chat
