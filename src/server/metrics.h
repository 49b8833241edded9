#pragma once
// The server's Prometheus metrics (text exposition format 0.0.4), named like vLLM's with a "tern:" prefix.
// Request timings are observed here by the connections; engine gauges (running, waiting, KV usage, prefix cache,
// preemptions, speculative decoding's drafts) are read from EngineStats when /metrics is scraped. Thread-safe.
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "engine/engine_config.h"
#include "engine/request.h"

namespace tern::server {

class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void observe(double value);
  // "# TYPE" line, cumulative _bucket lines with le labels, _sum and _count.
  std::string render(const std::string& name, const std::string& help) const;

 private:
  std::vector<double> upper_bounds_;
  std::vector<uint64_t> counts_;  // one per bound, plus +Inf
  double sum_ = 0.0;
  uint64_t count_ = 0;
};

// What one finished generation request reports, in seconds.
struct RequestTimings {
  double time_to_first_token_s = 0.0;
  std::vector<double> inter_token_latencies_s;
  double e2e_latency_s = 0.0;      // request received to last byte written
  double server_overhead_s = 0.0;  // e2e latency minus the engine's time (submit to last output)
};

// The compiled-grammar cache of the served model (grammar::GrammarCache), read when /metrics is scraped.
struct GrammarCacheStats {
  size_t memory_bytes = 0;
  size_t max_bytes = 0;
  size_t num_entries = 0;
  size_t num_evictions = 0;
  size_t num_hits = 0;
  size_t num_misses = 0;
};

class ServerMetrics {
 public:
  ServerMetrics();

  void observe_request(const RequestTimings& timings, const Usage& usage, std::optional<FinishReason> finish_reason);
  void count_response(int status);
  void count_cancelled();
  void connection_opened();
  void connection_closed();

  // The exposition text; `engine` and `grammars` are nullopt while the model is loading.
  std::string render(const std::optional<EngineStats>& engine,
                     const std::optional<GrammarCacheStats>& grammars = std::nullopt) const;

 private:
  mutable std::mutex mutex_;
  Histogram time_to_first_token_;
  Histogram inter_token_latency_;
  Histogram e2e_latency_;
  Histogram server_overhead_;
  Histogram spec_acceptance_length_;  // per finished request that verified drafts
  int64_t prompt_tokens_ = 0;
  int64_t cached_prompt_tokens_ = 0;
  int64_t generation_tokens_ = 0;
  std::map<std::string, int64_t> finished_by_reason_;
  std::map<int, int64_t> responses_by_status_;
  int64_t cancelled_ = 0;
  int64_t open_connections_ = 0;
};

}  // namespace tern::server
