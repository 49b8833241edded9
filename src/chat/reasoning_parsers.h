#pragma once
// The reasoning formats; output_parser_registry.cpp names them. `prompt_opens_think`: see ReasoningParserEntry.
#include <memory>

#include "chat/reasoning_parser.h"

namespace tern::chat {

std::unique_ptr<ReasoningParser> make_qwen3_reasoning_parser(bool prompt_opens_think);
std::unique_ptr<ReasoningParser> make_deepseek_r1_reasoning_parser(bool prompt_opens_think);
std::unique_ptr<ReasoningParser> make_deepseek_v3_reasoning_parser(bool prompt_opens_think);
std::unique_ptr<ReasoningParser> make_kimi_k2_reasoning_parser(bool prompt_opens_think);
std::unique_ptr<ReasoningParser> make_gpt_oss_reasoning_parser(bool prompt_opens_think);

}  // namespace tern::chat
