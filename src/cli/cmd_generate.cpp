#include <cstdio>
#include <nlohmann/json.hpp>

#include "chat/chat_template.h"
#include "cli/commands.h"
#include "cli/engine_options.h"
#include "cli/options.h"
#include "cli/streamed_generation.h"
#include "cli/validators.h"
#include "core/error.h"
#include "engine/engine_core.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace tern::cli {

namespace {

struct GenerateOptions {
  ModelFlags model;
  std::string prompt_ids;
  std::string prompt;
  bool chat = false;
  bool echo = false;
  int32_t max_tokens = 16;
  SamplingFlags sampling;
  EngineFlags engine;
};

void check_fits(size_t prompt_len, int32_t max_tokens, int64_t limit) {
  if (static_cast<int64_t>(prompt_len) + max_tokens > limit) {
    fail("prompt of {} tokens plus {} new tokens exceeds the model's context of {}", prompt_len, max_tokens, limit);
  }
}

// --prompt-ids: ids in, the generated ids out as one JSON array (what scripts and checks read).
void generate_ids(const GenerateOptions& options) {
  GenerateRequest request;
  request.prompt_token_ids = parse_token_ids(options.prompt_ids);
  request.sampling = options.sampling.to_params();
  request.stop.ignore_eos = options.sampling.ignore_eos;
  EngineConfig engine = options.engine.to_config(options.model.model_dir());  // its mistakes before the loading
  auto model = options.model.load(options.engine.parallel);
  check_fits(request.prompt_token_ids.size(), options.max_tokens, model->config().max_position_embeddings);
  std::vector<int32_t> tokens;
  if (options.max_tokens > 0) {
    request.stop.max_tokens = options.max_tokens;
    EngineCore core(*model, std::move(engine));
    core.add_request(1, std::move(request));
    while (core.has_unfinished_requests()) {
      for (const auto& output : core.step()) tokens.insert(tokens.end(), output.token_ids.begin(), output.token_ids.end());
    }
  }
  std::printf("%s\n", nlohmann::json(tokens).dump().c_str());
}

// --prompt: text in (as one user message of the chat template with --chat), the generated text streamed out.
void generate_text(const GenerateOptions& options) {
  const auto model_dir = options.model.model_dir();
  const Tokenizer tokenizer = Tokenizer::load(model_dir);
  std::string prompt = options.prompt;
  if (options.chat) {
    const auto chat_template = chat::ChatTemplate::from_model_dir(model_dir);
    if (!chat_template) fail("--chat: {} has no chat template (a base model: leave out --chat)", model_dir.string());
    chat::ChatTemplateInput input;
    input.messages.push_back({{"role", "user"}, {"content", options.prompt}});
    input.add_generation_prompt = true;
    prompt = chat_template->render(input);
  }
  GenerateRequest request;
  // A rendered chat prompt carries its special tokens already (as the server's chat completions do).
  request.prompt_token_ids = tokenizer.encode(prompt, /*add_special_tokens=*/!options.chat);
  request.sampling = options.sampling.to_params();
  request.stop.ignore_eos = options.sampling.ignore_eos;
  request.stop.max_tokens = options.max_tokens;
  EngineConfig engine = options.engine.to_config(model_dir);  // its mistakes before the loading
  auto model = options.model.load(options.engine.parallel);
  EngineCore core(*model, std::move(engine), tokenizer_text_streams(tokenizer));
  check_fits(request.prompt_token_ids.size(), options.max_tokens, core.max_model_len());
  if (options.echo) std::printf("%s", options.prompt.c_str());
  const auto result = run_streamed(core, 1, std::move(request), [](std::string_view text) {
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
  });
  std::printf("\n");
  if (!result.error.empty()) fail("generation stopped: {}", result.error);
}

}  // namespace

void add_generate_command(CLI::App& app) {
  auto options = std::make_shared<GenerateOptions>();
  CLI::App* cmd = app.add_subcommand(
      "generate", "Continue a prompt: text in, text streamed out (--prompt), or token ids in, a JSON array out "
                  "(--prompt-ids)");
  options->model.add_to(*cmd);
  options->engine.max_num_seqs = 1;  // one request: the KV cache holds one sequence of the whole context
  auto* ids = cmd->add_option("--prompt-ids", options->prompt_ids, "Prompt token ids, comma-separated (e.g. 1,2,3)");
  auto* text = cmd->add_option("--prompt", options->prompt, "Prompt text, tokenized with the model's tokenizer");
  ids->excludes(text);
  cmd->add_flag("--chat", options->chat, "Send --prompt as one user message through the model's chat template")
      ->needs(text);
  cmd->add_flag("--echo", options->echo, "Print the --prompt text before what is generated")->needs(text);
  cmd->add_option("--max-tokens", options->max_tokens, "Most tokens to generate")
      ->check(non_negative())->capture_default_str();
  options->sampling.add_to(*cmd);
  options->engine.add_to(*cmd);
  cmd->callback([options, ids, text] {
    if (!*ids && !*text) fail("generate: give --prompt TEXT or --prompt-ids 1,2,3");
    if (*ids) {
      generate_ids(*options);
    } else {
      generate_text(*options);
    }
  });
}

}  // namespace tern::cli
