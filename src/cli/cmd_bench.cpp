#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>

#include "cli/commands.h"
#include "core/error.h"
#include "model/model.h"
#include "model/sequence_runner.h"

namespace tern::cli {

void add_bench_command(CLI::App& app) {
  struct Options {
    std::string model;
    int64_t input_len = 128;
    int64_t output_len = 32;
    int threads = 0;
    uint32_t seed = 0;
  };
  auto options = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand("bench", "Measure prefill and decode tokens/s of one sequence; prints JSON");
  cmd->add_option("--model", options->model, "Hugging Face model directory")->required();
  cmd->add_option("--input-len", options->input_len, "Prompt tokens (random ids)")->check(CLI::PositiveNumber);
  cmd->add_option("--output-len", options->output_len, "Generated tokens")->check(CLI::PositiveNumber);
  cmd->add_option("--threads", options->threads, "CPU threads (0: all cores)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--seed", options->seed, "Seed of the random prompt");
  cmd->callback([options] {
    using Clock = std::chrono::steady_clock;
    auto backend = make_cpu_backend(options->threads);
    const auto load_start = Clock::now();
    auto model = load_model(options->model, *backend);
    const double load_s = std::chrono::duration<double>(Clock::now() - load_start).count();
    std::mt19937 rng(options->seed);
    std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(model->config().vocab_size - 1));
    std::vector<int32_t> prompt(options->input_len);
    for (auto& id : prompt) id = token(rng);

    SequenceRunner runner(*model, *backend, options->input_len + options->output_len);
    const auto prefill_start = Clock::now();
    Tensor logits = runner.append(prompt, false);
    int32_t next = backend->to_host_i32(backend->argmax(logits))[0];
    const double prefill_s = std::chrono::duration<double>(Clock::now() - prefill_start).count();
    const auto decode_start = Clock::now();
    for (int64_t i = 1; i < options->output_len; ++i) {
      logits = runner.append({&next, 1}, false);
      next = backend->to_host_i32(backend->argmax(logits))[0];
    }
    const double decode_s = std::chrono::duration<double>(Clock::now() - decode_start).count();
    nlohmann::json report = {
        {"model", options->model},
        {"backend", backend->name()},
        {"input_len", options->input_len},
        {"output_len", options->output_len},
        {"load_s", load_s},
        {"prefill_tokens_per_s", options->input_len / prefill_s},
        {"decode_tokens_per_s", options->output_len > 1 ? (options->output_len - 1) / decode_s : 0.0},
    };
    std::printf("%s\n", report.dump(2).c_str());
  });
}

}  // namespace tern::cli
