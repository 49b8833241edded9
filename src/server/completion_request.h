#pragma once
// POST /v1/completions: the request body read into engine terms (prompts still as text where the client sent text).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "server/generation_options.h"
#include "server/structured_output.h"

namespace tern::server {

// One prompt as the client sent it: text to encode, or token ids.
struct PromptInput {
  std::optional<std::string> text;
  std::vector<int32_t> token_ids;  // the ids sent, or (after encoding) the text's
};

struct CompletionRequest {
  GenerationOptions options;
  std::vector<PromptInput> prompts;  // one engine request each; choice index = prompt index * n + sequence index
  bool echo = false;                 // put the prompt text before each choice's text
  std::optional<int32_t> logprobs;   // the sampled token's logprob plus this many alternatives
  std::optional<OutputConstraint> constraint;  // response_format, guided_*, structured_outputs

  // `prompt` may be a string, a list of strings, a list of token ids or a list of token-id lists.
  // Throws a 400 ApiError naming the bad field.
  static CompletionRequest parse(const Json& body);
};

}  // namespace tern::server
