#include "engine/sampling_params.h"

#include <cmath>

#include "engine/request_field_error.h"
#include "grammar/compiled_grammar.h"

namespace tern {

void SamplingParams::validate(int64_t vocab_size) const {
  if (!(temperature >= 0.0f) || !std::isfinite(temperature)) {
    fail_field("temperature", "sampling: temperature {} must be >= 0", temperature);
  }
  if (top_k < 0) fail_field("top_k", "sampling: top_k {} must be >= 0 (0 keeps every token)", top_k);
  // A client's value may round to 0 as a float (1e-50): the message says what the engine got.
  if (!(top_p > 0.0f && top_p <= 1.0f)) {
    fail_field("top_p", "sampling: top_p {} (as a 32-bit float) must be in (0, 1]", top_p);
  }
  if (!(min_p >= 0.0f && min_p <= 1.0f)) fail_field("min_p", "sampling: min_p {} must be in [0, 1]", min_p);
  if (!(repetition_penalty > 0.0f) || !std::isfinite(repetition_penalty)) {
    fail_field("repetition_penalty", "sampling: repetition_penalty {} (as a 32-bit float) must be > 0",
               repetition_penalty);
  }
  if (!std::isfinite(frequency_penalty)) fail_field("frequency_penalty", "sampling: frequency_penalty must be finite");
  if (!std::isfinite(presence_penalty)) fail_field("presence_penalty", "sampling: presence_penalty must be finite");
  for (const auto& [token, bias] : logit_bias) {
    if (token < 0 || token >= vocab_size) {
      fail_field("logit_bias", "sampling: logit_bias token {} is outside the vocabulary of {} tokens", token,
                 vocab_size);
    }
    if (!std::isfinite(bias)) fail_field("logit_bias", "sampling: logit_bias of token {} must be finite", token);
  }
  if (n < 1) fail_field("n", "sampling: n {} must be >= 1", n);
  if (logprobs && (*logprobs < 0 || *logprobs > vocab_size)) {
    fail_field("logprobs", "sampling: logprobs {} must be in [0, {}]", *logprobs, vocab_size);
  }
  if (constraint) {
    const auto& vocabulary = constraint->vocabulary();
    if (static_cast<int64_t>(vocabulary.size()) > vocab_size) {
      fail("sampling: the constraint's grammar was compiled for a vocabulary of {} tokens, larger than the model's {}",
           vocabulary.size(), vocab_size);
    }
    if (vocabulary.eos_ids().empty()) fail("sampling: the constraint's vocabulary has no EOS token to end on");
  }
  if (constraint_after) {
    if (!constraint) fail("sampling: a reasoning end marker is set without a constraint to start after it");
    if (constraint_after->prefix.empty()) fail("sampling: the reasoning end marker is empty");
    if (constraint_after->max_tokens_between < 0) {
      fail("sampling: the reasoning end marker allows {} tokens between its parts", constraint_after->max_tokens_between);
    }
    for (const auto* part : {&constraint_after->prefix, &constraint_after->suffix}) {
      for (int32_t id : *part) {
        if (id < 0 || id >= vocab_size) {
          fail("sampling: the reasoning end marker's token {} is outside the vocabulary of {} tokens", id, vocab_size);
        }
      }
    }
  }
}

void StopConditions::validate(int64_t vocab_size) const {
  if (max_tokens && *max_tokens < 1) fail_field("max_tokens", "stop: max_tokens {} must be >= 1", *max_tokens);
  for (int32_t id : stop_token_ids) {
    if (id < 0 || id >= vocab_size) {
      fail_field("stop_token_ids", "stop: stop_token_ids entry {} is outside the vocabulary of {} tokens", id,
                 vocab_size);
    }
  }
  for (const auto& text : stop_strings) {
    if (text.empty()) fail_field("stop_strings", "stop: stop_strings must not be empty");
  }
}

}  // namespace tern
