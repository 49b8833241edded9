#pragma once
// What one run of `tern bench` measured on the engine, whichever way its requests were submitted (all at once, or
// turn by turn as conversations), and the latency summaries its report gives.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <vector>

namespace tern::cli {

struct BenchRun {
  int64_t num_requests = 0;
  int64_t num_input_tokens = 0;  // prompt tokens over all requests, cached ones included
  int64_t num_output_tokens = 0;
  double duration_s = 0.0;          // from the first submission to the last output
  std::vector<double> ttft_s;       // per request: submission to its first output
  std::vector<double> itl_s;        // per output after a request's first: the time since its previous output
  std::vector<double> host_step_s;  // per step: the scheduler's host time (schedule + update)
  // Per step that only decodes (each sequence its next token, or that and its drafts to verify): the whole step,
  // drafting and host work included.
  std::vector<double> decode_step_s;
};

// Mean and nearest-rank percentiles (p50, p90, p99, max) of durations given in seconds, in milliseconds; null when
// there are none.
nlohmann::json latency_summary_ms(std::vector<double> seconds);

}  // namespace tern::cli
