#pragma once
// Splits model output into reasoning and content, streaming. Each format is a ReasoningParser made by name through
// output_parser_registry.h (vLLM's --reasoning-parser names); most mark reasoning with <think>...</think>
// (ThinkTagReasoningParser), gpt-oss with harmony's analysis channel.
#include <string>
#include <string_view>

namespace tern::chat {

struct ReasoningDelta {
  std::string reasoning;
  std::string content;
};

class ReasoningParser {
 public:
  virtual ~ReasoningParser() = default;
  // Feeds the next piece of output; returns what is now certain. A partial marker at the end is held back.
  virtual ReasoningDelta feed(std::string_view text) = 0;
  // The output ended: returns everything still held.
  virtual ReasoningDelta flush() = 0;
};

struct ThinkTags {
  std::string start = "<think>";
  std::string end = "</think>";
  // A marker that also ends reasoning and begins the content, where it stays (Kimi K2 starts its tool-call section
  // without closing </think>); empty for none.
  std::string implicit_end;
};

// Reasoning between a start and an end tag (Qwen3, DeepSeek-R1 style). The template may have opened <think> in the
// prompt already, so the output can start inside reasoning; a start tag the output still writes there is dropped.
// The newlines that chat templates put around the tags ("<think>\n...\n</think>\n\n") are not part of either side.
class ThinkTagReasoningParser : public ReasoningParser {
 public:
  explicit ThinkTagReasoningParser(bool starts_in_reasoning, ThinkTags tags = {});

  ReasoningDelta feed(std::string_view text) override;
  ReasoningDelta flush() override;

  // True when the prompt ends inside an open reasoning block (its last start tag is not closed).
  static bool prompt_opens_reasoning(std::string_view prompt, const ThinkTags& tags = {});
  // True when the prompt's last tag is an end tag: the template closed the reasoning block (thinking switched off,
  // "<think>\n\n</think>"), as vLLM's is_reasoning_end reads the prompt's ids.
  static bool prompt_closes_reasoning(std::string_view prompt, const ThinkTags& tags = {});

 private:
  enum class State { kBeforeReasoning, kReasoningStart, kReasoning, kAfterReasoning };

  void process(ReasoningDelta& delta, bool final);
  // Drops newlines at the start of a section; false while the buffer holds nothing else yet.
  bool skip_leading_newlines();
  // Where reasoning ends in the buffer (npos if not yet) and how long the end marker that is consumed is.
  size_t find_reasoning_end(size_t& consumed_len) const;

  ThinkTags tags_;
  State state_;
  std::string buffer_;
  bool skipping_newlines_;
};

}  // namespace tern::chat
