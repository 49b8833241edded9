#include "server/serving_model.h"

#include <algorithm>

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

std::unique_ptr<ServingModel> ServingModel::load(const ServingModelConfig& config) {
  if (!std::filesystem::is_directory(config.model_dir)) fail("--model {}: not a directory", config.model_dir.string());
  auto model = std::unique_ptr<ServingModel>(
      new ServingModel(Tokenizer::load(config.model_dir), chat::ChatTemplate::from_model_dir(config.model_dir)));
  for (int32_t id = 0; id < model->tokenizer_.vocab_size(); ++id) {
    model->max_token_bytes_ = std::max(model->max_token_bytes_, model->tokenizer_.token_bytes(id).size());
  }
  model->model_ = ShardedModel::load(config.model_dir, config.backend, config.parallel, config.num_threads,
                                    config.on_load_progress);
  model->grammars_ = std::make_unique<grammar::GrammarCache>(
      grammar_vocabulary(model->tokenizer_, model->model_->config().eos_token_ids));
  model->grammars_->warm_up();
  model->engine_ =
      std::make_unique<Engine>(*model->model_, config.engine, tokenizer_text_streams(model->tokenizer_));
  return model;
}

}  // namespace tern::server
