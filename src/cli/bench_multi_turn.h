#pragma once
// `tern bench --dataset-name multi-turn` (SGLang's benchmark/hicache/bench_multiturn.py): conversations of several
// turns, each turn's prompt the conversation so far plus a new user message, so that a conversation's turns share a
// growing prefix and, with many conversations interleaved, the working set outgrows the device's KV pool: the
// workload of a KV cache tier below the prefix cache.
#include <cstdint>
#include <nlohmann/json.hpp>

#include "cli/bench_run.h"
#include "engine/engine_core.h"
#include "engine/sampling_params.h"

namespace tern::cli {

struct MultiTurnConfig {
  int64_t num_conversations = 1;
  int64_t num_turns = 1;
  int64_t input_len = 1;   // tokens of each user message: a first turn's whole prompt, what each later turn adds
  int64_t output_len = 1;  // tokens generated each turn
  int64_t max_concurrency = 1;  // conversations with a request in flight at most
  uint32_t seed = 0;            // of the user messages' random ids
  SamplingParams sampling;      // a seed in it is offset by each request's id
};

struct MultiTurnRun {
  BenchRun run;
  nlohmann::json report;  // the report's "multi_turn" section
};

// Runs every turn of every conversation on `core`. A conversation's next turn is submitted as soon as its previous
// one finishes, unless max_concurrency conversations are in flight: then it waits at the back of the queue of
// conversations waiting for a slot, so that conversations take turns round-robin. Fails before submitting anything
// when a conversation's last turn would not fit the engine's context.
MultiTurnRun run_multi_turn(EngineCore& core, const MultiTurnConfig& config, int64_t vocab_size);

}  // namespace tern::cli
