#include "server/serving_model.h"

#include <algorithm>

#include "chat/output_parser_registry.h"
#include "core/error.h"

namespace tern::server {

namespace {

// The vocabulary as the grammar engine sees it. A grammar ends on the EOS tokens the engine stops at (the model's),
// so that an output the grammar completes is also one the engine finishes.
std::shared_ptr<const grammar::TokenVocabulary> grammar_vocabulary(const Tokenizer& tokenizer,
                                                                  const std::vector<int32_t>& model_eos_ids) {
  std::vector<std::string> bytes(static_cast<size_t>(tokenizer.vocab_size()));
  for (int32_t id = 0; id < tokenizer.vocab_size(); ++id) {
    if (!tokenizer.is_special(id)) bytes[static_cast<size_t>(id)] = tokenizer.token_bytes(id);
  }
  std::vector<int32_t> eos;
  for (int32_t id : model_eos_ids) {
    if (id >= 0 && id < tokenizer.vocab_size()) eos.push_back(id);
  }
  if (eos.empty() && tokenizer.eos_id()) eos.push_back(*tokenizer.eos_id());
  return std::make_shared<const grammar::TokenVocabulary>(std::move(bytes), std::move(eos));
}

}  // namespace

ServingModel::ServingModel(Tokenizer tokenizer, std::optional<chat::ChatTemplate> chat_template)
    : tokenizer_(std::move(tokenizer)), chat_template_(std::move(chat_template)) {}

ServingModel::~ServingModel() = default;

chat::ChatOutputOptions ServingModel::output_options(std::string_view prompt) const {
  chat::ChatOutputOptions options =
      chat_template_ ? chat::ChatOutputOptions::for_chat_template(*chat_template_, prompt) : chat::ChatOutputOptions{};
  if (!tool_call_parser_.empty()) options.tool_call_parser = tool_call_parser_;
  if (!reasoning_parser_.empty()) options.reasoning_parser = reasoning_parser_;
  return options;
}

std::unique_ptr<ServingModel> ServingModel::load(const ServingModelConfig& config) {
  if (!std::filesystem::is_directory(config.model_dir)) fail("--model {}: not a directory", config.model_dir.string());
  std::optional<chat::ChatTemplate> chat_template =
      config.chat_template_override.empty()
          ? chat::ChatTemplate::from_model_dir(config.model_dir)
          : chat::ChatTemplate::from_tokenizer_dir(config.model_dir, config.chat_template_override);
  auto model =
      std::unique_ptr<ServingModel>(new ServingModel(Tokenizer::load(config.model_dir), std::move(chat_template)));
  model->tool_call_parser_ = config.tool_call_parser;
  model->reasoning_parser_ = config.reasoning_parser;
  if (config.require_tool_call_parser && model->output_options("").tool_call_parser.empty()) {
    fail("--enable-auto-tool-choice: {} has no tool-call syntax this server knows in its chat template; name the "
         "format with --tool-call-parser ({})", config.model_dir.string(), chat::tool_call_parser_names());
  }
  for (int32_t id = 0; id < model->tokenizer_.vocab_size(); ++id) {
    model->max_token_bytes_ = std::max(model->max_token_bytes_, model->tokenizer_.token_bytes(id).size());
  }
  model->model_ = ShardedModel::load(config.model_dir, config.backend, config.parallel, config.num_threads,
                                    config.on_load_progress, config.quantization);
  model->grammars_ = std::make_unique<grammar::GrammarCache>(
      grammar_vocabulary(model->tokenizer_, model->model_->config().eos_token_ids), 256, grammar::CompileOptions{},
      config.grammar_cache_bytes);
  model->grammars_->warm_up();
  model->engine_ =
      std::make_unique<Engine>(*model->model_, config.engine, tokenizer_text_streams(model->tokenizer_));
  return model;
}

}  // namespace tern::server
