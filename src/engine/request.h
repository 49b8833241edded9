#pragma once
// What a client submits to the engine and what it receives back, one output per sequence per step.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/sampling_params.h"

namespace tern {

struct GenerateRequest {
  std::vector<int32_t> prompt_token_ids;
  SamplingParams sampling;
  StopConditions stop;
  int32_t priority = 0;  // lower runs first under the priority policy; ignored under FCFS
  // Requests with the same nonzero group (the prompts of one API request) take their admission turns together
  // (Sequence::admission_turn); 0: the request is a group of its own.
  uint64_t admission_group = 0;
};

enum class FinishReason { kStop, kLength, kAbort };
std::string_view finish_reason_name(FinishReason reason);  // "stop", "length", "abort"

struct TokenLogprob {
  int32_t token_id = 0;
  float logprob = 0.0f;
  std::vector<std::pair<int32_t, float>> top;  // the most likely tokens and their logprobs, most likely first
};

struct Usage {
  int32_t prompt_tokens = 0;
  int32_t cached_tokens = 0;  // prompt tokens whose KV came from the prefix cache
  int32_t completion_tokens = 0;  // over all n sequences
  // Speculative decoding, over all n sequences: verifications of drafts, the draft tokens they verified, and those
  // kept (each kept draft is one of completion_tokens).
  int32_t spec_drafts = 0;
  int32_t spec_draft_tokens = 0;
  int32_t spec_accepted_tokens = 0;
};

// New tokens of one sequence (index < n) of a request since its previous output.
struct RequestOutput {
  uint64_t request_id = 0;
  int32_t index = 0;
  std::vector<int32_t> token_ids;
  std::string text;  // detokenized delta; empty without a detokenizer
  std::vector<TokenLogprob> logprobs;  // one per token when the request asked for logprobs
  std::optional<FinishReason> finish_reason;  // set on the sequence's last output
  bool request_finished = false;              // the request's last output: every sequence has finished
  std::string error;                          // why the engine aborted the request, when it did
  Usage usage;                                // the request's totals so far
};

}  // namespace tern
