// Prometheus exposition: cumulative buckets, counters and the engine gauges, by their documented definitions.
#include <gtest/gtest.h>

#include <regex>
#include <sstream>

#include "server/metrics.h"

namespace tern::server {
namespace {

TEST(HistogramTest, BucketsAreCumulativeWithInf) {
  Histogram histogram({0.1, 1.0});
  histogram.observe(0.05);
  histogram.observe(0.1);  // le is inclusive
  histogram.observe(0.5);
  histogram.observe(7.0);
  const std::string text = histogram.render("x_seconds", "help");
  EXPECT_NE(text.find("# TYPE x_seconds histogram\n"), std::string::npos);
  EXPECT_NE(text.find("x_seconds_bucket{le=\"0.1\"} 2\n"), std::string::npos) << text;
  EXPECT_NE(text.find("x_seconds_bucket{le=\"1\"} 3\n"), std::string::npos) << text;
  EXPECT_NE(text.find("x_seconds_bucket{le=\"+Inf\"} 4\n"), std::string::npos) << text;
  EXPECT_NE(text.find("x_seconds_count 4\n"), std::string::npos) << text;
  EXPECT_NE(text.find("x_seconds_sum 7.65\n"), std::string::npos) << text;
}

TEST(ServerMetricsTest, RendersCountersAndEngineGauges) {
  ServerMetrics metrics;
  RequestTimings timings;
  timings.time_to_first_token_s = 0.02;
  timings.inter_token_latencies_s = {0.01, 0.02};
  timings.e2e_latency_s = 0.1;
  timings.server_overhead_s = 0.001;
  metrics.observe_request(timings, Usage{10, 4, 3}, FinishReason::kLength);
  metrics.count_response(200);
  metrics.count_response(400);
  metrics.count_cancelled();
  EngineStats stats;
  stats.num_running = 2;
  stats.num_waiting = 5;
  stats.kv_usage = 0.25;
  stats.prefix_query_tokens = 100;
  stats.prefix_hit_tokens = 40;
  stats.prefix_hit_rate = 0.4;
  stats.num_preemptions = 3;
  const std::string text = metrics.render(stats);
  for (const char* line : {"tern:num_requests_running 2\n", "tern:num_requests_waiting 5\n",
                           "tern:kv_cache_usage_perc 0.25\n", "tern:prefix_cache_queries_total 100\n",
                           "tern:prefix_cache_hits_total 40\n", "tern:prefix_cache_hit_rate 0.4\n",
                           "tern:num_preemptions_total 3\n", "tern:prompt_tokens_total 10\n",
                           "tern:cached_prompt_tokens_total 4\n", "tern:generation_tokens_total 3\n",
                           "tern:request_success_total{finished_reason=\"length\"} 1\n",
                           "tern:http_responses_total{status=\"400\"} 1\n", "tern:request_cancelled_total 1\n",
                           "tern:time_to_first_token_seconds_count 1\n", "tern:inter_token_latency_seconds_count 2\n",
                           "tern:e2e_request_latency_seconds_count 1\n", "tern:server_overhead_seconds_count 1\n"}) {
    EXPECT_NE(text.find(line), std::string::npos) << "missing: " << line << "\n" << text;
  }
  // Every sample line is `name{labels} value` with a name Prometheus accepts.
  const std::regex sample(R"(^[a-zA-Z_:][a-zA-Z0-9_:]*(\{[a-z_]+="[^"]*"\})? [-+0-9.eInf]+$)");
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.empty() || line[0] == '#') continue;
    EXPECT_TRUE(std::regex_match(line, sample)) << line;
  }
  EXPECT_EQ(metrics.render(std::nullopt).find("tern:num_requests_running"), std::string::npos);
}

// Per request that verified drafts: its mean acceptance length (1 + kept drafts per verification), shown with
// speculation on.
TEST(ServerMetricsTest, RequestsMeanAcceptanceLengthsWithSpeculation) {
  ServerMetrics metrics;
  metrics.observe_request({}, Usage{.prompt_tokens = 5, .completion_tokens = 9, .spec_drafts = 4,
                                    .spec_draft_tokens = 12, .spec_accepted_tokens = 6},
                          FinishReason::kLength);
  metrics.observe_request({}, Usage{.prompt_tokens = 5, .completion_tokens = 1}, FinishReason::kLength);
  EngineStats stats;
  stats.num_speculative_tokens = 3;
  const std::string text = metrics.render(stats);
  for (const char* line : {"tern:request_spec_decode_mean_acceptance_length_bucket{le=\"2\"} 0\n",
                           "tern:request_spec_decode_mean_acceptance_length_bucket{le=\"2.5\"} 1\n",
                           "tern:request_spec_decode_mean_acceptance_length_sum 2.5\n",
                           "tern:request_spec_decode_mean_acceptance_length_count 1\n"}) {
    EXPECT_NE(text.find(line), std::string::npos) << "missing: " << line << "\n" << text;
  }
  EXPECT_EQ(metrics.render(EngineStats{}).find("spec_decode"), std::string::npos);
}

TEST(Metrics, GrammarCacheGaugesAndCounters) {
  ServerMetrics metrics;
  std::string text = metrics.render(std::nullopt, GrammarCacheStats{.memory_bytes = 1234, .max_bytes = 4096,
                                                                    .num_entries = 3, .num_evictions = 7});
  for (const char* line : {"tern:grammar_cache_memory_bytes 1234\n", "tern:grammar_cache_max_memory_bytes 4096\n",
                           "tern:grammar_cache_entries 3\n", "# TYPE tern:grammar_cache_evictions_total counter\n",
                           "tern:grammar_cache_evictions_total 7\n"}) {
    EXPECT_NE(text.find(line), std::string::npos) << "missing: " << line << "\n" << text;
  }
  EXPECT_EQ(metrics.render(std::nullopt).find("grammar_cache"), std::string::npos);
}

}  // namespace
}  // namespace tern::server
