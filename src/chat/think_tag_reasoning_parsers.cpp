// The <think>...</think> reasoning formats, told apart by where reasoning starts and what else ends it.
#include "chat/reasoning_parsers.h"

namespace tern::chat {

// Qwen3 (and QwQ): reasoning opens with <think>, in the output or already in the prompt (enable_thinking).
std::unique_ptr<ReasoningParser> make_qwen3_reasoning_parser(bool prompt_opens_think) {
  return std::make_unique<ThinkTagReasoningParser>(prompt_opens_think);
}

// DeepSeek-R1: the output is reasoning from its first token; <think> is often left out (the template of R1-0528
// writes it into the prompt, the first R1 did not), and without </think> all of it is reasoning.
std::unique_ptr<ReasoningParser> make_deepseek_r1_reasoning_parser(bool) {
  return std::make_unique<ThinkTagReasoningParser>(/*starts_in_reasoning=*/true);
}

// DeepSeek-V3.1 and later hybrids: thinking is a template switch, so reasoning starts where the prompt opened
// <think> (thinking on) and the output is all content where the prompt closed it (thinking off).
std::unique_ptr<ReasoningParser> make_deepseek_v3_reasoning_parser(bool prompt_opens_think) {
  return std::make_unique<ThinkTagReasoningParser>(prompt_opens_think);
}

// Kimi K2 Thinking: reasoning from the first token (<think> optional), ended by </think> or by the start of a
// tool-call section, which belongs to the content (the kimi_k2 tool-call parser reads it).
std::unique_ptr<ReasoningParser> make_kimi_k2_reasoning_parser(bool) {
  ThinkTags tags;
  tags.implicit_end = "<|tool_calls_section_begin|>";
  return std::make_unique<ThinkTagReasoningParser>(/*starts_in_reasoning=*/true, std::move(tags));
}

}  // namespace tern::chat
