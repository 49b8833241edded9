// `tern bench`: the offline engine benchmark (N prompts submitted at once, or N conversations turn by turn with
// --dataset-name multi-turn; throughput and latency percentiles) and, with --scheduler-only, the scheduler's host
// overhead per step with no model at all.
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <thread>
#include <unordered_map>

#include "cli/bench_multi_turn.h"
#include "cli/bench_prompts.h"
#include "cli/bench_run.h"
#include "cli/commands.h"
#include "cli/engine_options.h"
#include "cli/validators.h"
#include "core/error.h"
#include "engine/engine_core.h"
#include "engine/scheduler.h"
#include "model/model.h"

namespace tern::cli {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

struct BenchOptions {
  ModelFlags model;
  int64_t num_prompts = 32;
  int64_t input_len = 128;
  int64_t output_len = 32;
  uint32_t seed = 0;
  BenchDatasetFlags dataset;
  std::optional<int64_t> num_turns;        // multi-turn only; unset: 1
  std::optional<int64_t> max_concurrency;  // multi-turn only; unset: every conversation
  bool scheduler_only = false;
  int64_t scheduler_steps = 200;
  int64_t vocab_size = 32000;
  SamplingFlags sampling;
  EngineFlags engine;
};

// Every prompt submitted at once, then steps until all have finished.
BenchRun run_all_at_once(EngineCore& core, std::vector<std::vector<int32_t>> prompts, const BenchOptions& options) {
  BenchRun run;
  const auto start = Clock::now();
  for (int64_t i = 0; i < options.num_prompts; ++i) {
    GenerateRequest request;
    request.prompt_token_ids = std::move(prompts[i]);
    request.sampling = options.sampling.to_params();
    if (request.sampling.seed) request.sampling.seed = *request.sampling.seed + static_cast<uint64_t>(i);
    request.stop.max_tokens = static_cast<int32_t>(options.output_len);
    request.stop.ignore_eos = true;  // fixed output lengths
    ++run.num_requests;
    run.num_input_tokens += static_cast<int64_t>(request.prompt_token_ids.size());
    core.add_request(static_cast<uint64_t>(i), std::move(request));
  }
  std::unordered_map<uint64_t, double> last_token_s;
  const int64_t tokens_per_decode = 1 + core.stats().num_speculative_tokens;
  while (core.has_unfinished_requests()) {
    const auto outputs = core.step();
    const double now = seconds_since(start);
    const auto& timing = core.last_step_timing();
    run.host_step_s.push_back(timing.schedule_s + timing.update_s);
    if (timing.num_sequences > 0 && timing.num_tokens <= timing.num_sequences * tokens_per_decode) {
      run.decode_step_s.push_back(timing.schedule_s + timing.execute_s + timing.update_s);
    }
    for (const auto& out : outputs) {
      run.num_output_tokens += static_cast<int64_t>(out.token_ids.size());
      const auto it = last_token_s.find(out.request_id);
      if (it == last_token_s.end()) {
        run.ttft_s.push_back(now);
        last_token_s.emplace(out.request_id, now);
      } else {
        run.itl_s.push_back(now - it->second);
        it->second = now;
      }
    }
  }
  run.duration_s = seconds_since(start);
  return run;
}

MultiTurnConfig multi_turn_config(const BenchOptions& options) {
  MultiTurnConfig config;
  config.num_conversations = options.num_prompts;
  config.num_turns = options.num_turns.value_or(1);
  config.input_len = options.input_len;
  config.output_len = options.output_len;
  config.max_concurrency = options.max_concurrency.value_or(options.num_prompts);
  config.seed = options.seed;
  config.sampling = options.sampling.to_params();
  return config;
}

nlohmann::json run_engine_bench(const BenchOptions& options) {
  // The text is read and tokenized before the model loads, so that a wrong path fails at once.
  BenchPrompts prompts;
  if (options.dataset.reads_text()) {
    prompts = text_prompts(options.dataset, Tokenizer::load(options.model.model_dir()), options.num_prompts,
                           options.input_len, options.seed);
  }
  // The engine's flags too (a typo in --speculative-config), before minutes of loading.
  EngineConfig engine = options.engine.to_config(options.model.model_dir());
  const auto load_start = Clock::now();
  auto model = options.model.load(options.engine.parallel);
  const double load_s = seconds_since(load_start);
  EngineCore core(*model, std::move(engine));
  const double ready_s = seconds_since(load_start);  // weights, KV pool sizing and allocation, recorded steps

  if (options.dataset.name == "random") {
    prompts = random_prompts(options.num_prompts, options.input_len, model->config().vocab_size, options.seed);
  }
  BenchRun run;
  nlohmann::json multi_turn;
  if (options.dataset.name == "multi-turn") {
    prompts.dataset = {{"name", "multi-turn"}};
    auto conversations = run_multi_turn(core, multi_turn_config(options), model->config().vocab_size);
    run = std::move(conversations.run);
    multi_turn = std::move(conversations.report);
  } else {
    run = run_all_at_once(core, std::move(prompts.token_ids), options);
  }
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
      {"duration_s", run.duration_s},
      {"requests_per_s", run.num_requests / run.duration_s},
      {"input_tokens_per_s", run.num_input_tokens / run.duration_s},
      {"output_tokens_per_s", run.num_output_tokens / run.duration_s},
      {"ttft_ms", latency_summary_ms(run.ttft_s)},
      {"itl_ms", latency_summary_ms(run.itl_s)},
      {"scheduler_ms_per_step", latency_summary_ms(run.host_step_s)},
      {"decode_step_ms", latency_summary_ms(run.decode_step_s)},
      {"steps", stats.num_steps},
      {"preemptions", stats.num_preemptions},
      {"prefix_hit_rate", stats.prefix_hit_rate},
  };
  if (!multi_turn.is_null()) report["multi_turn"] = std::move(multi_turn);
  if (stats.num_host_kv_blocks > 0) {
    const auto bandwidth = [](int64_t bytes, double seconds) { return seconds > 0 ? bytes / seconds / 1e9 : 0.0; };
    report["kv_tiers"] = {
        {"host_blocks", stats.num_host_kv_blocks},
        {"write_policy", options.engine.kv_write_policy},
        {"prefix_hit_tokens", stats.prefix_hit_tokens},
        {"host_hit_tokens", stats.prefix_host_hit_tokens},
        {"disk_hit_tokens", stats.prefix_disk_hit_tokens},
        {"bytes_to_host", stats.kv_bytes_to_host},
        {"bytes_to_device", stats.kv_bytes_to_device},
        {"copy_seconds", stats.kv_copy_seconds},
        {"copy_gb_per_s", bandwidth(stats.kv_bytes_to_host + stats.kv_bytes_to_device, stats.kv_copy_seconds)},
    };
    if (stats.kv_disk_tier) {
      report["kv_tiers"]["disk"] = {
          {"blocks", stats.kv_disk_blocks},
          {"bytes", stats.kv_disk_bytes},
          {"read_bytes", stats.kv_disk_read_bytes},
          {"write_bytes", stats.kv_disk_write_bytes},
          {"read_gb_per_s", bandwidth(stats.kv_disk_read_bytes, stats.kv_disk_read_seconds)},
          {"write_gb_per_s", bandwidth(stats.kv_disk_write_bytes, stats.kv_disk_write_seconds)},
          {"corrupt_records", stats.kv_disk_corrupt_records},
      };
    }
  }
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
      {"schedule_ms", latency_summary_ms(schedule_s)},
      {"update_ms", latency_summary_ms(update_s)},
      {"scheduler_ms_per_step", latency_summary_ms(total_s)},
  };
}

}  // namespace

void add_bench_command(CLI::App& app) {
  auto options = std::make_shared<BenchOptions>();
  CLI::App* cmd = app.add_subcommand(
      "bench", "Offline engine benchmark: N prompts at once; prints throughput and latency percentiles as JSON");
  options->model.add_to(*cmd, /*model_required=*/false);  // not needed with --scheduler-only
  cmd->add_option("--num-prompts", options->num_prompts, "Requests submitted at once (multi-turn: conversations)")
      ->check(positive());
  cmd->add_option("--input-len", options->input_len,
                  "Prompt tokens per request (multi-turn: per user message, which each turn adds to the conversation)")
      ->check(positive());
  cmd->add_option("--output-len", options->output_len, "Generated tokens per request (multi-turn: per turn)")
      ->check(positive());
  // --seed is the sampling seed (SamplingFlags); the prompts have their own.
  cmd->add_option("--prompt-seed", options->seed, "Seed of the random prompts, or of the text windows' offsets");
  options->dataset.add_to(*cmd);
  cmd->add_option("--num-turns", options->num_turns, "multi-turn: turns per conversation (default 1)");
  cmd->add_option("--max-concurrency", options->max_concurrency,
                  "multi-turn: conversations with a request in flight at most (default all); the others wait their "
                  "turn round-robin");
  cmd->add_flag("--scheduler-only", options->scheduler_only,
                "Measure the scheduler's host time per step with no model (use --num-prompts 256)");
  cmd->add_option("--scheduler-steps", options->scheduler_steps, "Decode steps measured with --scheduler-only")
      ->check(positive());
  options->sampling.add_to(*cmd);
  options->engine.add_to(*cmd);
  cmd->callback([options] {
    if (!options->scheduler_only && options->model.model.empty()) {
      fail("bench: --model is required (or --scheduler-only)");
    }
    options->dataset.validate();
    const bool multi_turn = options->dataset.name == "multi-turn";
    if (options->num_turns && !multi_turn) fail("bench: --num-turns is read only with --dataset-name multi-turn");
    if (options->num_turns && *options->num_turns < 1) {
      fail("bench: --num-turns must be at least 1, not {}", *options->num_turns);
    }
    if (options->max_concurrency && !multi_turn) {
      fail("bench: --max-concurrency is read only with --dataset-name multi-turn");
    }
    if (options->max_concurrency && *options->max_concurrency < 1) {
      fail("bench: --max-concurrency must be at least 1, not {}", *options->max_concurrency);
    }
    if (options->scheduler_only && options->dataset.name != "random") {
      fail("bench: --scheduler-only runs no model; its prompts are random ids (leave out --dataset-name)");
    }
    const auto report = options->scheduler_only ? run_scheduler_bench(*options) : run_engine_bench(*options);
    std::printf("%s\n", report.dump(2).c_str());
  });
}

}  // namespace tern::cli
