// `tern bench`: the offline engine benchmark (N prompts submitted at once, throughput and latency percentiles) and,
// with --scheduler-only, the scheduler's host overhead per step with no model at all.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>
#include <unordered_map>

#include "cli/bench_prompts.h"
#include "cli/commands.h"
#include "cli/engine_options.h"
#include "core/error.h"
#include "engine/engine_core.h"
#include "engine/scheduler.h"
#include "model/model.h"

namespace tern::cli {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// Mean and nearest-rank percentiles of `values`, in milliseconds when `scale` is 1e3.
nlohmann::json summary(std::vector<double> values, double scale) {
  if (values.empty()) return nullptr;
  std::sort(values.begin(), values.end());
  const auto at = [&](double q) {
    const size_t rank = static_cast<size_t>(std::ceil(q * values.size()));
    return values[std::min(values.size() - 1, rank == 0 ? 0 : rank - 1)] * scale;
  };
  double sum = 0;
  for (double v : values) sum += v;
  return {{"mean", sum / values.size() * scale}, {"p50", at(0.5)}, {"p90", at(0.9)}, {"p99", at(0.99)},
          {"max", values.back() * scale}};
}

struct BenchOptions {
  ModelFlags model;
  int64_t num_prompts = 32;
  int64_t input_len = 128;
  int64_t output_len = 32;
  uint32_t seed = 0;
  BenchDatasetFlags dataset;
  bool scheduler_only = false;
  int64_t scheduler_steps = 200;
  int64_t vocab_size = 32000;
  SamplingFlags sampling;
  EngineFlags engine;
};

nlohmann::json run_engine_bench(const BenchOptions& options) {
  // The text is read and tokenized before the model loads, so that a wrong path fails at once.
  BenchPrompts prompts;
  if (options.dataset.name == "text") {
    prompts = text_prompts(options.dataset, Tokenizer::load(options.model.model_dir()), options.num_prompts,
                           options.input_len, options.seed);
  }
  const auto load_start = Clock::now();
  auto model = options.model.load(options.engine.parallel);
  const double load_s = seconds_since(load_start);
  EngineCore core(*model, options.engine.to_config());
  const double ready_s = seconds_since(load_start);  // weights, KV pool sizing and allocation, recorded steps

  if (options.dataset.name == "random") {
    prompts = random_prompts(options.num_prompts, options.input_len, model->config().vocab_size, options.seed);
  }
  const auto start = Clock::now();
  for (int64_t i = 0; i < options.num_prompts; ++i) {
    GenerateRequest request;
    request.prompt_token_ids = std::move(prompts.token_ids[i]);
    request.sampling = options.sampling.to_params();
    if (request.sampling.seed) request.sampling.seed = *request.sampling.seed + static_cast<uint64_t>(i);
    request.stop.max_tokens = static_cast<int32_t>(options.output_len);
    request.stop.ignore_eos = true;  // fixed output lengths
    core.add_request(static_cast<uint64_t>(i), std::move(request));
  }
  std::unordered_map<uint64_t, double> last_token_s;
  std::vector<double> ttft_s, itl_s, host_step_s;
  int64_t output_tokens = 0;
  while (core.has_unfinished_requests()) {
    const auto outputs = core.step();
    const double now = seconds_since(start);
    const auto& timing = core.last_step_timing();
    host_step_s.push_back(timing.schedule_s + timing.update_s);
    for (const auto& out : outputs) {
      output_tokens += static_cast<int64_t>(out.token_ids.size());
      const auto it = last_token_s.find(out.request_id);
      if (it == last_token_s.end()) {
        ttft_s.push_back(now);
        last_token_s.emplace(out.request_id, now);
      } else {
        itl_s.push_back(now - it->second);
        it->second = now;
      }
    }
  }
  const double duration_s = seconds_since(start);
  const auto stats = core.stats();
  const auto& budget = core.kv_budget();
  nlohmann::json report = {
      {"mode", "offline"},
      {"model", options.model.model},
      {"backend", model->backend(0).name()},
      {"tensor_parallel_size", model->data_parallel() ? 1 : model->size()},
      {"data_parallel_size", model->data_parallel() ? model->size() : 1},
      {"decode_context_parallel_size", model->backend(0).kv_context_shard().size},
      {"threads",
       options.model.threads == 0 ? static_cast<int>(std::thread::hardware_concurrency()) : options.model.threads},
      {"dataset", prompts.dataset},
      {"num_prompts", options.num_prompts},
      {"input_len", options.input_len},
      {"output_len", options.output_len},
      {"max_num_batched_tokens", options.engine.max_num_batched_tokens},
      {"overlap_schedule", options.engine.overlap_schedule},
      {"kv_cache", {{"bytes_per_token", budget.bytes_per_token}, {"num_blocks", budget.num_blocks},
                    {"block_size", budget.block_size}}},
      {"load_s", load_s},
      {"ready_s", ready_s},
      {"duration_s", duration_s},
      {"requests_per_s", options.num_prompts / duration_s},
      {"input_tokens_per_s", options.num_prompts * options.input_len / duration_s},
      {"output_tokens_per_s", output_tokens / duration_s},
      {"ttft_ms", summary(ttft_s, 1e3)},
      {"itl_ms", summary(itl_s, 1e3)},
      {"scheduler_ms_per_step", summary(host_step_s, 1e3)},
      {"steps", stats.num_steps},
      {"preemptions", stats.num_preemptions},
      {"prefix_hit_rate", stats.prefix_hit_rate},
  };
  if (stats.num_speculative_tokens > 0) {
    report["speculative_decoding"] = {
        {"config", options.engine.speculative_config},
        {"num_drafts", stats.num_spec_drafts},
        {"num_draft_tokens", stats.num_spec_draft_tokens},
        {"num_accepted_tokens", stats.num_spec_accepted_tokens},
        {"accepted_tokens_per_position", stats.num_spec_accepted_tokens_per_pos},
        {"mean_acceptance_length", stats.mean_acceptance_length()},
    };
  }
  return report;
}

// The scheduler alone: `num_prompts` requests decode with a stand-in for the model that returns a token per
// sampled chunk at once, so each step's time is schedule + update and nothing else.
nlohmann::json run_scheduler_bench(const BenchOptions& options) {
  const int32_t block_size = options.engine.block_size;
  const int64_t tokens_per_request = options.input_len + options.output_len + options.scheduler_steps;
  const auto num_blocks = static_cast<int32_t>(options.num_prompts * ((tokens_per_request + block_size - 1) / block_size));
  KvCacheManager kv(num_blocks, block_size, !options.engine.no_prefix_cache);
  SchedulerConfig config;
  config.max_num_batched_tokens = options.engine.max_num_batched_tokens;
  config.max_num_seqs = options.engine.max_num_seqs;
  config.max_model_len = tokens_per_request + 1;
  Scheduler scheduler(config, kv);
  std::mt19937 rng(options.seed);
  for (int64_t i = 0; i < options.num_prompts; ++i) {
    GenerateRequest request;
    request.prompt_token_ids = random_prompt(rng, options.input_len, options.vocab_size);
    request.sampling = options.sampling.to_params();
    request.stop.max_tokens = static_cast<int32_t>(options.output_len + options.scheduler_steps);
    request.stop.ignore_eos = true;
    scheduler.add_request(static_cast<uint64_t>(i), std::move(request));
  }
  const auto fake_execute = [&](const StepPlan& plan) {
    StepResult result;
    for (const auto& chunk : plan.chunks) {
      if (chunk.sample) result.tokens.push_back({chunk.sequence_id, static_cast<int32_t>(rng() % options.vocab_size), {}});
    }
    return result;
  };
  // Warm up until every request is decoding, then measure steady-state decode steps.
  int64_t warmup_steps = 0;
  while (scheduler.num_waiting() > 0 || warmup_steps < options.output_len / 2) {
    const StepPlan plan = scheduler.schedule();
    scheduler.update(plan, fake_execute(plan));
    ++warmup_steps;
  }
  std::vector<double> schedule_s, update_s, total_s;
  int64_t running_sum = 0;
  for (int64_t step = 0; step < options.scheduler_steps; ++step) {
    const auto t0 = Clock::now();
    const StepPlan plan = scheduler.schedule();
    const auto t1 = Clock::now();
    const StepResult result = fake_execute(plan);
    const auto t2 = Clock::now();
    scheduler.update(plan, result);
    const auto t3 = Clock::now();
    schedule_s.push_back(std::chrono::duration<double>(t1 - t0).count());
    update_s.push_back(std::chrono::duration<double>(t3 - t2).count());
    total_s.push_back(std::chrono::duration<double>((t1 - t0) + (t3 - t2)).count());
    running_sum += scheduler.num_running();
  }
  return {
      {"mode", "scheduler_only"},
      {"num_requests", options.num_prompts},
      {"input_len", options.input_len},
      {"block_size", block_size},
      {"num_kv_blocks", num_blocks},
      {"warmup_steps", warmup_steps},
      {"measured_steps", options.scheduler_steps},
      {"mean_running", static_cast<double>(running_sum) / options.scheduler_steps},
      {"schedule_ms", summary(schedule_s, 1e3)},
      {"update_ms", summary(update_s, 1e3)},
      {"scheduler_ms_per_step", summary(total_s, 1e3)},
  };
}

}  // namespace

void add_bench_command(CLI::App& app) {
  auto options = std::make_shared<BenchOptions>();
  CLI::App* cmd = app.add_subcommand(
      "bench", "Offline engine benchmark: N prompts at once; prints throughput and latency percentiles as JSON");
  options->model.add_to(*cmd, /*model_required=*/false);  // not needed with --scheduler-only
  cmd->add_option("--num-prompts", options->num_prompts, "Requests submitted at once")->check(CLI::PositiveNumber);
  cmd->add_option("--input-len", options->input_len, "Prompt tokens per request")->check(CLI::PositiveNumber);
  cmd->add_option("--output-len", options->output_len, "Generated tokens per request")->check(CLI::PositiveNumber);
  // --seed is the sampling seed (SamplingFlags); the prompts have their own.
  cmd->add_option("--prompt-seed", options->seed, "Seed of the random prompts, or of the text windows' offsets");
  options->dataset.add_to(*cmd);
  cmd->add_flag("--scheduler-only", options->scheduler_only,
                "Measure the scheduler's host time per step with no model (use --num-prompts 256)");
  cmd->add_option("--scheduler-steps", options->scheduler_steps, "Decode steps measured with --scheduler-only")
      ->check(CLI::PositiveNumber);
  options->sampling.add_to(*cmd);
  options->engine.add_to(*cmd);
  cmd->callback([options] {
    if (!options->scheduler_only && options->model.model.empty()) {
      fail("bench: --model is required (or --scheduler-only)");
    }
    options->dataset.validate();
    if (options->scheduler_only && options->dataset.name != "random") {
      fail("bench: --scheduler-only runs no model; its prompts are random ids (leave out --dataset-name)");
    }
    const auto report = options->scheduler_only ? run_scheduler_bench(*options) : run_engine_bench(*options);
    std::printf("%s\n", report.dump(2).c_str());
  });
}

}  // namespace tern::cli
