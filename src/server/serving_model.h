#pragma once
// Everything a server needs of one model: the tokenizer, the chat template (if the model has one), the backend,
// the weights and the running engine, loaded from a Hugging Face model directory.
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "chat/chat_output_parser.h"
#include "chat/chat_template.h"
#include "engine/engine.h"
#include "engine/sharded_model.h"
#include "grammar/grammar_cache.h"
#include "tokenizer/tokenizer.h"

namespace tern::server {

struct ServingModelConfig {
  std::filesystem::path model_dir;
  std::string backend = "cpu";
  int num_threads = 0;  // CPU backend threads; 0: all cores
  ParallelConfig parallel;
  OnlineQuantization quantization = OnlineQuantization::none;  // --quantization
  EngineConfig engine;
  LoadProgress::Listener on_load_progress;  // hears how far loading the weights has come; none: quiet
  std::string chat_template_override;       // Jinja source in place of the model's template (--chat-template)
  std::string tool_call_parser;             // --tool-call-parser; empty: the one the chat template's markers call for
  std::string reasoning_parser;             // --reasoning-parser; empty: the one the chat template's markers call for
  bool require_tool_call_parser = false;    // --enable-auto-tool-choice: refuse to load without a tool-call parser
  size_t grammar_cache_bytes = grammar::kDefaultGrammarCacheBytes;  // --grammar-cache-memory
};

class ServingModel {
 public:
  // Throws tern::Error naming the file or setting that is wrong.
  static std::unique_ptr<ServingModel> load(const ServingModelConfig& config);
  ~ServingModel();

  const Tokenizer& tokenizer() const { return tokenizer_; }
  const chat::ChatTemplate* chat_template() const { return chat_template_ ? &*chat_template_ : nullptr; }
  // How a chat reply rendered from `prompt` is parsed: the template's default parsers, or those the config names.
  chat::ChatOutputOptions output_options(std::string_view prompt) const;
  // Structured-output grammars compiled against this model's vocabulary (thread-safe).
  grammar::GrammarCache& grammars() const { return *grammars_; }
  Engine& engine() { return *engine_; }
  const Engine& engine() const { return *engine_; }
  int64_t max_model_len() const { return engine_->max_model_len(); }
  // No text longer than this encodes into max_model_len tokens or fewer: longer prompts are refused before the
  // (expensive) encoding.
  size_t max_prompt_text_bytes() const { return static_cast<size_t>(max_model_len()) * max_token_bytes_; }

 private:
  ServingModel(Tokenizer tokenizer, std::optional<chat::ChatTemplate> chat_template);

  Tokenizer tokenizer_;
  std::optional<chat::ChatTemplate> chat_template_;
  std::string tool_call_parser_;  // empty: the template's default
  std::string reasoning_parser_;  // empty: the template's default
  std::unique_ptr<ShardedModel> model_;
  size_t max_token_bytes_ = 1;  // the longest token's bytes
  std::unique_ptr<grammar::GrammarCache> grammars_;
  std::unique_ptr<Engine> engine_;  // last: stops before the model goes away
};

}  // namespace tern::server
