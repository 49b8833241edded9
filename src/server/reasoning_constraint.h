#pragma once
// Structured outputs after the reasoning, as vLLM and SGLang serve them with a reasoning parser: the grammar is not
// applied while the model reasons and starts right after the end-of-reasoning marker (vLLM's
// StructuredOutputManager.should_advance and the parsers' is_reasoning_end, vllm/v1/structured_output/__init__.py;
// SGLang's python/sglang/srt/constrained/reasoner_grammar_backend.py). vLLM's
// --structured-outputs-config '{"enable_in_reasoning": true}' turns this off: the grammar then applies from the first
// token, over the reasoning too.
#include <optional>
#include <string_view>

#include "chat/chat_output_parser.h"
#include "engine/sampling_params.h"
#include "tokenizer/tokenizer.h"

namespace tern::server {

// The marker, in `tokenizer`'s ids, after which the constraint of a chat output parsed as `options` say applies,
// given the rendered `prompt`; nullopt where it applies from the first token: no reasoning parser, or a prompt that
// closed the <think> block itself (thinking switched off, "<think>\n\n</think>").
//
// Otherwise the output is taken to be in its reasoning from the first token, as vLLM's is_reasoning_end reads a
// prompt without a closing tag: also for Qwen3 with thinking on, whose template leaves <think> to the model (the
// model then writes <think>, reasons, writes </think> and only then the constrained answer; a model that skips its
// reasoning altogether is never constrained, as in vLLM). The output parser must start in reasoning too.
std::optional<ReasoningEndMarker> constraint_start_after_reasoning(const chat::ChatOutputOptions& options,
                                                                   std::string_view prompt,
                                                                   const Tokenizer& tokenizer);

}  // namespace tern::server
