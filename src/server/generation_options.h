#pragma once
// The request fields that completions and chat completions share (OpenAI's sampling parameters and vLLM's
// extensions), read into the engine's SamplingParams and StopConditions.
#include <optional>
#include <string>

#include "engine/sampling_params.h"
#include "server/request_fields.h"

namespace tern::server {

enum class Endpoint { kCompletions, kChatCompletions };

struct GenerationOptions {
  std::optional<std::string> model;  // nullopt: the served model
  SamplingParams sampling;
  StopConditions stop;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage: a last chunk with the usage
  bool tokens_as_ids = false;  // vLLM's return_tokens_as_token_ids: logprobs spell tokens "token_id:<id>"
};

// Reads model, max_tokens (chat: max_completion_tokens too), temperature, top_p, top_k, min_p, n, stop,
// stop_token_ids, seed, presence/frequency/repetition penalties, logit_bias, ignore_eos, stream and stream_options.
// Logprobs differ between the endpoints and are read by each. Throws a 400 ApiError naming a bad field.
GenerationOptions parse_generation_options(const RequestFields& fields, Endpoint endpoint);

}  // namespace tern::server
