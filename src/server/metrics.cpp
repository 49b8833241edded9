#include "server/metrics.h"

#include <fmt/format.h>

#include <algorithm>

namespace tern::server {

namespace {

// vLLM's bucket bounds for the same histograms.
const std::vector<double> kTtftBounds = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
                                         2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
const std::vector<double> kItlBounds = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75,
                                        1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0};
const std::vector<double> kE2eBounds = {0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0,
                                        40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
const std::vector<double> kOverheadBounds = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                             0.1, 0.25, 0.5, 1.0, 2.5};
// Mean acceptance lengths: 1 (every draft rejected) up to 1 + k, k at most 16 (SpeculativeConfig).
const std::vector<double> kAcceptanceLengthBounds = {1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 5.0, 6.0, 8.0, 12.0, 17.0};

std::string number(double value) { return fmt::format("{}", value); }

void gauge(std::string& out, const char* name, const char* help, double value) {
  out += fmt::format("# HELP {0} {1}\n# TYPE {0} gauge\n{0} {2}\n", name, help, number(value));
}

void counter(std::string& out, const char* name, const char* help, double value) {
  out += fmt::format("# HELP {0} {1}\n# TYPE {0} counter\n{0} {2}\n", name, help, number(value));
}

}  // namespace

Histogram::Histogram(std::vector<double> upper_bounds)
    : upper_bounds_(std::move(upper_bounds)), counts_(upper_bounds_.size() + 1, 0) {}

void Histogram::observe(double value) {
  const auto bucket = std::lower_bound(upper_bounds_.begin(), upper_bounds_.end(), value) - upper_bounds_.begin();
  ++counts_[static_cast<size_t>(bucket)];
  sum_ += value;
  ++count_;
}

std::string Histogram::render(const std::string& name, const std::string& help) const {
  std::string out = fmt::format("# HELP {0} {1}\n# TYPE {0} histogram\n", name, help);
  uint64_t cumulative = 0;
  for (size_t i = 0; i < upper_bounds_.size(); ++i) {
    cumulative += counts_[i];
    out += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, number(upper_bounds_[i]), cumulative);
  }
  out += fmt::format("{}_bucket{{le=\"+Inf\"}} {}\n{}_sum {}\n{}_count {}\n", name, count_, name, number(sum_), name,
                     count_);
  return out;
}

ServerMetrics::ServerMetrics()
    : time_to_first_token_(kTtftBounds), inter_token_latency_(kItlBounds), e2e_latency_(kE2eBounds),
      server_overhead_(kOverheadBounds), spec_acceptance_length_(kAcceptanceLengthBounds) {}

void ServerMetrics::observe_request(const RequestTimings& timings, const Usage& usage,
                                    std::optional<FinishReason> finish_reason) {
  std::lock_guard lock(mutex_);
  if (usage.completion_tokens > 0) time_to_first_token_.observe(timings.time_to_first_token_s);
  for (double latency : timings.inter_token_latencies_s) inter_token_latency_.observe(latency);
  e2e_latency_.observe(timings.e2e_latency_s);
  server_overhead_.observe(std::max(0.0, timings.server_overhead_s));
  prompt_tokens_ += usage.prompt_tokens;
  cached_prompt_tokens_ += usage.cached_tokens;
  generation_tokens_ += usage.completion_tokens;
  if (finish_reason) ++finished_by_reason_[std::string(finish_reason_name(*finish_reason))];
  if (usage.spec_drafts > 0) {
    spec_acceptance_length_.observe(1.0 + static_cast<double>(usage.spec_accepted_tokens) / usage.spec_drafts);
  }
}

void ServerMetrics::count_response(int status) {
  std::lock_guard lock(mutex_);
  ++responses_by_status_[status];
}

void ServerMetrics::count_cancelled() {
  std::lock_guard lock(mutex_);
  ++cancelled_;
}

void ServerMetrics::connection_opened() {
  std::lock_guard lock(mutex_);
  ++open_connections_;
}

void ServerMetrics::connection_closed() {
  std::lock_guard lock(mutex_);
  --open_connections_;
}

std::string ServerMetrics::render(const std::optional<EngineStats>& engine,
                                  const std::optional<GrammarCacheStats>& grammars) const {
  std::string out;
  if (grammars) {
    gauge(out, "tern:grammar_cache_memory_bytes", "Bytes held by cached compiled structured-output grammars.",
          static_cast<double>(grammars->memory_bytes));
    gauge(out, "tern:grammar_cache_max_memory_bytes", "The grammar cache's memory budget (--grammar-cache-memory).",
          static_cast<double>(grammars->max_bytes));
    gauge(out, "tern:grammar_cache_entries", "Compiled grammars in the cache.", static_cast<double>(grammars->num_entries));
    counter(out, "tern:grammar_cache_evictions_total", "Compiled grammars evicted (least recently used first).",
            static_cast<double>(grammars->num_evictions));
    counter(out, "tern:grammar_cache_hits_total", "Grammar requests served from the cache.",
            static_cast<double>(grammars->num_hits));
    counter(out, "tern:grammar_cache_misses_total", "Grammar requests that compiled.", static_cast<double>(grammars->num_misses));
  }
  if (engine) {
    gauge(out, "tern:num_requests_running", "Requests the engine is running.", engine->num_running);
    gauge(out, "tern:num_requests_waiting", "Requests waiting to be scheduled.", engine->num_waiting);
    gauge(out, "tern:kv_cache_usage_perc", "Fraction of KV cache blocks held by sequences (1 = full).",
          engine->kv_usage);
    gauge(out, "tern:num_kv_cache_blocks", "KV cache blocks in the pool.", engine->num_kv_blocks);
    counter(out, "tern:prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache.",
            static_cast<double>(engine->prefix_query_tokens));
    counter(out, "tern:prefix_cache_hits_total", "Prompt tokens found in the prefix cache.",
            static_cast<double>(engine->prefix_hit_tokens));
    gauge(out, "tern:prefix_cache_hit_rate", "Prefix cache hits over queries, in tokens.", engine->prefix_hit_rate);
    counter(out, "tern:num_preemptions_total", "Sequences preempted for lack of KV cache.",
            static_cast<double>(engine->num_preemptions));
    if (engine->num_host_kv_blocks > 0) {
      out += "# HELP tern:prefix_cache_tier_hits_total Prompt tokens of prefix hits loaded back from a lower KV cache "
             "tier (part of tern:prefix_cache_hits_total).\n# TYPE tern:prefix_cache_tier_hits_total counter\n";
      out += fmt::format("tern:prefix_cache_tier_hits_total{{tier=\"host\"}} {}\n", engine->prefix_host_hit_tokens);
      out += fmt::format("tern:prefix_cache_tier_hits_total{{tier=\"disk\"}} {}\n", engine->prefix_disk_hit_tokens);
      gauge(out, "tern:host_kv_cache_blocks", "KV cache blocks in the host tier's pool.",
            static_cast<double>(engine->num_host_kv_blocks));
      gauge(out, "tern:host_kv_cache_usage_perc", "Fraction of the host tier's blocks holding cached prefixes.",
            static_cast<double>(engine->num_host_kv_blocks_cached) / static_cast<double>(engine->num_host_kv_blocks));
      out += "# HELP tern:kv_offload_bytes_total KV cache bytes copied between the device and the host tier.\n"
             "# TYPE tern:kv_offload_bytes_total counter\n";
      out += fmt::format("tern:kv_offload_bytes_total{{direction=\"to_host\"}} {}\n", engine->kv_bytes_to_host);
      out += fmt::format("tern:kv_offload_bytes_total{{direction=\"to_device\"}} {}\n", engine->kv_bytes_to_device);
      counter(out, "tern:kv_offload_copy_seconds_total",
              "Seconds the copies between the device and the host tier took (device time on GPUs); bytes over "
              "seconds is their bandwidth.", engine->kv_copy_seconds);
    }
    if (engine->kv_disk_tier) {
      gauge(out, "tern:kv_disk_cache_blocks", "KV cache blocks in the disk tier.",
            static_cast<double>(engine->kv_disk_blocks));
      gauge(out, "tern:kv_disk_cache_bytes", "Bytes of the disk tier's files.", static_cast<double>(engine->kv_disk_bytes));
      counter(out, "tern:kv_disk_read_bytes_total", "KV bytes read back from the disk tier.",
              static_cast<double>(engine->kv_disk_read_bytes));
      counter(out, "tern:kv_disk_write_bytes_total", "KV bytes written to the disk tier.",
              static_cast<double>(engine->kv_disk_write_bytes));
      counter(out, "tern:kv_disk_read_seconds_total", "Seconds spent reading the disk tier.",
              engine->kv_disk_read_seconds);
      counter(out, "tern:kv_disk_write_seconds_total", "Seconds spent writing the disk tier.",
              engine->kv_disk_write_seconds);
      counter(out, "tern:kv_disk_corrupt_records_total",
              "Disk tier records refused (checksum, truncation or mismatch) and never served.",
              static_cast<double>(engine->kv_disk_corrupt_records));
    }
    if (engine->num_speculative_tokens > 0) {
      counter(out, "tern:spec_decode_num_drafts_total", "Speculative decoding: sequences' draft runs verified.",
              static_cast<double>(engine->num_spec_drafts));
      counter(out, "tern:spec_decode_num_draft_tokens_total", "Speculative decoding: draft tokens verified.",
              static_cast<double>(engine->num_spec_draft_tokens));
      counter(out, "tern:spec_decode_num_accepted_tokens_total", "Speculative decoding: draft tokens accepted.",
              static_cast<double>(engine->num_spec_accepted_tokens));
      out += "# HELP tern:spec_decode_num_accepted_tokens_per_pos_total Speculative decoding: draft tokens accepted "
             "at each draft position.\n# TYPE tern:spec_decode_num_accepted_tokens_per_pos_total counter\n";
      for (size_t pos = 0; pos < engine->num_spec_accepted_tokens_per_pos.size(); ++pos) {
        out += fmt::format("tern:spec_decode_num_accepted_tokens_per_pos_total{{position=\"{}\"}} {}\n", pos,
                           engine->num_spec_accepted_tokens_per_pos[pos]);
      }
    }
  }
  std::lock_guard lock(mutex_);
  counter(out, "tern:prompt_tokens_total", "Prompt tokens of finished requests.", static_cast<double>(prompt_tokens_));
  counter(out, "tern:cached_prompt_tokens_total", "Prompt tokens of finished requests served from the prefix cache.",
          static_cast<double>(cached_prompt_tokens_));
  counter(out, "tern:generation_tokens_total", "Generated tokens of finished requests.",
          static_cast<double>(generation_tokens_));
  out += "# HELP tern:request_success_total Finished generation requests by finish reason.\n"
         "# TYPE tern:request_success_total counter\n";
  for (const char* reason : {"stop", "length", "abort"}) {
    const auto it = finished_by_reason_.find(reason);
    out += fmt::format("tern:request_success_total{{finished_reason=\"{}\"}} {}\n", reason,
                       it == finished_by_reason_.end() ? 0 : it->second);
  }
  out += "# HELP tern:http_responses_total HTTP responses by status code.\n# TYPE tern:http_responses_total counter\n";
  for (const auto& [status, count] : responses_by_status_) {
    out += fmt::format("tern:http_responses_total{{status=\"{}\"}} {}\n", status, count);
  }
  counter(out, "tern:request_cancelled_total", "Generation requests cancelled because the client went away.",
          static_cast<double>(cancelled_));
  gauge(out, "tern:num_open_connections", "Open HTTP connections.", static_cast<double>(open_connections_));
  out += time_to_first_token_.render("tern:time_to_first_token_seconds", "Time from request to first token.");
  out += inter_token_latency_.render("tern:inter_token_latency_seconds", "Time between consecutive outputs.");
  out += e2e_latency_.render("tern:e2e_request_latency_seconds", "Time from request to the last byte of the response.");
  out += server_overhead_.render("tern:server_overhead_seconds",
                                 "Request latency the server adds: end to end minus the engine's time.");
  if (engine && engine->num_speculative_tokens > 0) {
    out += spec_acceptance_length_.render("tern:request_spec_decode_mean_acceptance_length",
                                          "Speculative decoding: tokens a verification yielded on average (1 + kept "
                                          "drafts per verification), per finished request that verified drafts.");
  }
  return out;
}

}  // namespace tern::server
