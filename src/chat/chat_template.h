#pragma once
// Renders a conversation into a prompt with a model's chat template, as transformers' apply_chat_template does:
// the template sees messages, tools (none when absent), add_generation_prompt, the special tokens of
// tokenizer_config.json (bos_token, eos_token, ...) and any extra keyword arguments (enable_thinking, ...).
// DeepSeek-V3.2 and V4 checkpoints ship no template; for them a ChatTemplate is DeepSeek's built-in encoder
// (deepseek_encoder.h), which takes the same input.
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "chat/deepseek_encoder.h"
#include "chat/template.h"

namespace tern::chat {

// The input of one render. Use nlohmann::ordered_json: the key order of tools and arguments reaches the prompt
// through `tojson`, and nlohmann::json would sort the keys.
struct ChatTemplateInput {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  nlohmann::ordered_json tools;  // null: no tools (the template sees none)
  bool add_generation_prompt = false;
  nlohmann::ordered_json extra_kwargs = nlohmann::ordered_json::object();  // enable_thinking, documents, ...
  // The request's response_format (null: none). Jinja templates do not see it; DeepSeek's encoder renders its
  // JSON schema into the system prompt.
  nlohmann::ordered_json response_format;

  // From a request object {"messages": [...], "tools": [...], "add_generation_prompt": bool, "response_format": {...},
  // ...extra kwargs}.
  // Throws tern::Error naming a missing or ill-typed field.
  static ChatTemplateInput from_request(const nlohmann::ordered_json& request);
};

class ChatTemplate {
 public:
  // `special_tokens` maps names like "bos_token" to their text; a template sees each as a variable.
  ChatTemplate(std::string source, nlohmann::ordered_json special_tokens = nlohmann::ordered_json::object());

  // Reads the template and special tokens of a model directory: tokenizer_config.json's "chat_template" (a string,
  // or a list of {name, template} from which "default" is taken), else chat_template.jinja or chat_template.json.
  // `path` is the directory or the tokenizer_config.json file itself. A non-empty `template_override` replaces
  // the directory's template (the special tokens still come from tokenizer_config.json). A directory without a
  // template whose config.json names DeepSeek-V3.2 or V4 gets DeepSeek's built-in encoder.
  static ChatTemplate from_tokenizer_dir(const std::filesystem::path& path, const std::string& template_override = "");
  // A model directory's template where it has one (tokenizer_config.json's "chat_template", chat_template.jinja or
  // chat_template.json, else DeepSeek's built-in encoder for a DeepSeek-V3.2 / V4 config.json); nullopt for a base
  // model, which has none.
  static std::optional<ChatTemplate> from_model_dir(const std::filesystem::path& dir);
  // DeepSeek's built-in encoder in place of a Jinja template.
  static ChatTemplate deepseek(DeepSeekEncoding encoding);

  // Throws tern::Error with the template's line and column when the template fails or raises.
  std::string render(const ChatTemplateInput& input) const;

  // The Jinja source; empty for DeepSeek's built-in encoder.
  const std::string& source() const { return source_; }
  // Set when this is DeepSeek's built-in encoder.
  std::optional<DeepSeekEncoding> deepseek_encoding() const { return deepseek_encoding_; }

 private:
  explicit ChatTemplate(DeepSeekEncoding encoding);

  std::string source_;
  std::optional<Template> template_;  // absent for the built-in encoder
  std::optional<DeepSeekEncoding> deepseek_encoding_;
  ValueMap special_tokens_;
};

}  // namespace tern::chat
