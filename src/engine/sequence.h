#pragma once
// The scheduler's state of one sequence (one of a request's n completions) and of the request they belong to.
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "engine/request.h"
#include "engine/stop_string_matcher.h"
#include "engine/text_stream.h"
#include "kvcache/kv_cache_manager.h"

namespace tern {

struct RequestState;

enum class SequenceStatus { kWaiting, kRunning, kFinished };

struct Sequence {
  uint64_t id = 0;
  RequestState* request = nullptr;
  int32_t index = 0;  // which of the request's n sequences
  // How many sequences of its request's admission group were queued before it. Waiting sequences are admitted by
  // turn before arrival: the k-th sequence of every group goes before the (k+1)-th of any, so that a fan-out of
  // prompts x n admits in turn with the requests that arrive after it instead of holding them back.
  int64_t admission_turn = 0;
  // Queued holding blocks (a fork's shared prompt blocks): such sequences are admitted before the others, which
  // could otherwise wait forever for the room these hold.
  bool queued_holding_blocks = false;
  uint64_t seed = 0;
  SequenceStatus status = SequenceStatus::kWaiting;
  std::vector<int32_t> token_ids;  // prompt, then output
  int32_t num_prompt_tokens = 0;
  // Tokens whose KV is computed or scheduled to be. A preempted sequence drops back to 0 and recomputes its
  // prompt and output (keeping the output it already streamed).
  int32_t num_computed_tokens = 0;
  SequenceBlocks blocks;
  // The data-parallel rank whose KV cache holds `blocks` (0 without data parallelism). Chosen when the sequence is
  // first admitted and fixed from then on (`rank_fixed`): that rank's runner holds its sampler's state (random
  // draws, the counts of penalties), so a preempted sequence recomputes on the same rank.
  int32_t rank = 0;
  bool rank_fixed = false;
  bool known_to_runner = false;
  // Tokens sampled by scheduled steps and not applied yet (Scheduler::update). The overlap scheduler schedules a
  // step before applying the previous one: then one token is in flight while it schedules (a chunk reaching it
  // carries kTokenInFlight), and two once it scheduled the next sample.
  int32_t num_tokens_in_flight = 0;
  // Draft tokens of the verify chunk in flight (speculative decoding): computed past num_computed_tokens, which
  // grows by those the sampler accepts when the step is applied.
  int32_t num_draft_tokens_in_flight = 0;
  std::unique_ptr<TextStream> text_stream;
  std::optional<StopStringMatcher> stop_matcher;

  int32_t num_output_tokens() const { return static_cast<int32_t>(token_ids.size()) - num_prompt_tokens; }
  // Tokens known or in flight.
  int32_t num_tokens() const { return static_cast<int32_t>(token_ids.size()) + num_tokens_in_flight; }
  int32_t num_uncomputed_tokens() const { return num_tokens() - num_computed_tokens; }
};

struct RequestState {
  uint64_t id = 0;
  uint64_t arrival = 0;  // admission order among requests
  GenerateRequest request;
  int32_t max_output_tokens = 0;  // max_tokens bounded by the context left after the prompt
  std::optional<uint64_t> seed;
  std::vector<Sequence*> sequences;  // index order; the forks appear once the first sequence finished its prompt
  bool forked = false;
  // The sequences queued so far by the request's admission group, shared by the group's requests.
  std::shared_ptr<int64_t> group_num_queued;
  int32_t num_finished_sequences = 0;
  std::optional<int32_t> num_cached_tokens;  // set when the first sequence is admitted
  int32_t num_completion_tokens = 0;
  // Speculative decoding over the request's sequences (Usage::spec_drafts and after).
  int32_t num_spec_drafts = 0;
  int32_t num_spec_draft_tokens = 0;
  int32_t num_spec_accepted_tokens = 0;
};

}  // namespace tern
