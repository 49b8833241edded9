#pragma once
// The request most engine tests send: greedy, exactly `max_tokens` new tokens (EOS does not end it early).
#include <cstdint>
#include <utility>
#include <vector>

#include "engine/request.h"

namespace tern::testing {

inline GenerateRequest greedy(std::vector<int32_t> prompt, int32_t max_tokens) {
  GenerateRequest r;
  r.prompt_token_ids = std::move(prompt);
  r.sampling.temperature = 0.0f;
  r.stop.max_tokens = max_tokens;
  r.stop.ignore_eos = true;
  return r;
}

}  // namespace tern::testing
