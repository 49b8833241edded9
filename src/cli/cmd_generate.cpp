#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/options.h"
#include "core/error.h"
#include "model/model.h"
#include "model/sequence_runner.h"

namespace tern::cli {

void add_generate_command(CLI::App& app) {
  struct Options {
    std::string model;
    std::string prompt_ids;
    int64_t max_tokens = 16;
    int threads = 0;
  };
  auto options = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand("generate", "Generate tokens after a prompt; prints them as a JSON array");
  cmd->add_option("--model", options->model, "Hugging Face model directory")->required();
  cmd->add_option("--prompt-ids", options->prompt_ids, "Prompt token ids, comma-separated (e.g. 1,2,3)")->required();
  cmd->add_option("--max-tokens", options->max_tokens, "Number of tokens to generate")->check(CLI::NonNegativeNumber);
  cmd->add_option("--threads", options->threads, "CPU threads (0: all cores)")->check(CLI::NonNegativeNumber);
  cmd->callback([options] {
    const auto prompt = parse_token_ids(options->prompt_ids);
    auto backend = make_cpu_backend(options->threads);
    auto model = load_model(options->model, *backend);
    const int64_t limit = model->config().max_position_embeddings;
    if (static_cast<int64_t>(prompt.size()) + options->max_tokens > limit) {
      fail("prompt of {} tokens plus {} new tokens exceeds the model's context of {}", prompt.size(),
           options->max_tokens, limit);
    }
    const auto tokens = greedy_generate(*model, *backend, prompt, options->max_tokens);
    std::printf("%s\n", nlohmann::json(tokens).dump().c_str());
  });
}

}  // namespace tern::cli
