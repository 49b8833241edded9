#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/engine_options.h"
#include "cli/options.h"
#include "core/error.h"
#include "engine/engine_core.h"
#include "model/model.h"

namespace tern::cli {

void add_generate_command(CLI::App& app) {
  struct Options {
    std::string model;
    std::string prompt_ids;
    int32_t max_tokens = 16;
    int threads = 0;
    std::string backend = "cpu";
    SamplingFlags sampling;
    EngineFlags engine;
  };
  auto options = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand("generate", "Generate tokens after a prompt; prints them as a JSON array");
  cmd->add_option("--model", options->model, "Hugging Face model directory")->required();
  cmd->add_option("--prompt-ids", options->prompt_ids, "Prompt token ids, comma-separated (e.g. 1,2,3)")->required();
  cmd->add_option("--max-tokens", options->max_tokens, "Most tokens to generate")->check(CLI::NonNegativeNumber);
  cmd->add_option("--threads", options->threads, "CPU threads (0: all cores)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--backend", options->backend, "cpu or cuda");
  options->sampling.add_to(*cmd);
  options->engine.add_to(*cmd);
  cmd->callback([options] {
    GenerateRequest request;
    request.prompt_token_ids = parse_token_ids(options->prompt_ids);
    request.sampling = options->sampling.to_params();
    request.stop.ignore_eos = options->sampling.ignore_eos;
    auto model =
        ShardedModel::load(options->model, options->backend, options->engine.parallel, options->threads);
    const int64_t limit = model->config().max_position_embeddings;
    if (static_cast<int64_t>(request.prompt_token_ids.size()) + options->max_tokens > limit) {
      fail("prompt of {} tokens plus {} new tokens exceeds the model's context of {}", request.prompt_token_ids.size(),
           options->max_tokens, limit);
    }
    std::vector<int32_t> tokens;
    if (options->max_tokens > 0) {
      request.stop.max_tokens = options->max_tokens;
      EngineCore core(*model, options->engine.to_config("256MiB"));
      core.add_request(1, std::move(request));
      while (core.has_unfinished_requests()) {
        for (const auto& output : core.step()) tokens.insert(tokens.end(), output.token_ids.begin(), output.token_ids.end());
      }
    }
    std::printf("%s\n", nlohmann::json(tokens).dump().c_str());
  });
}

}  // namespace tern::cli
