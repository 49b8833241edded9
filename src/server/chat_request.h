#pragma once
// POST /v1/chat/completions: the request body read and checked, ready for the chat template.
#include <cstdint>
#include <optional>

#include "chat/chat_template.h"
#include "server/generation_options.h"
#include "server/structured_output.h"

namespace tern::server {

struct ChatRequest {
  GenerationOptions options;
  Json messages = Json::array();  // content parts joined into strings; tool-call arguments parsed into objects
  Json tools;                     // null: none
  bool parse_tool_calls = false;  // tools were given and tool_choice lets the model call them
  // tool_choice "required" (force_tool_call, no name) or naming a function: the output is constrained to calls.
  bool force_tool_call = false;
  std::optional<std::string> forced_function;
  std::optional<OutputConstraint> constraint;  // response_format, guided_*, structured_outputs
  Json response_format;  // as the request gave it (null: none): DeepSeek's encoder renders its schema as a hint
  std::optional<int32_t> top_logprobs;  // nullopt: no logprobs; else the sampled token's plus this many
  bool add_generation_prompt = true;
  Json template_kwargs = Json::object();  // chat_template_kwargs (enable_thinking, ...)

  // Throws a 400 ApiError naming the bad field.
  static ChatRequest parse(const Json& body);
  chat::ChatTemplateInput template_input() const;
};

}  // namespace tern::server
