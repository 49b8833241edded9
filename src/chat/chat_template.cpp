#include "chat/chat_template.h"

#include <fstream>
#include <sstream>

#include "core/error.h"

namespace tern::chat {
namespace {

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot open {}", path.string());
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

nlohmann::ordered_json read_json_file(const std::filesystem::path& path) {
  try {
    return nlohmann::ordered_json::parse(read_file(path));
  } catch (const nlohmann::json::exception& e) {
    fail("{} is not valid JSON: {}", path.string(), e.what());
  }
}

// tokenizer_config.json stores special tokens as strings or as AddedToken objects {"content": ...}.
std::optional<std::string> token_text(const nlohmann::ordered_json& token) {
  if (token.is_string()) return token.get<std::string>();
  if (token.is_object() && token.contains("content") && token["content"].is_string()) {
    return token["content"].get<std::string>();
  }
  return std::nullopt;
}

std::string template_from_field(const nlohmann::ordered_json& field, const std::filesystem::path& where) {
  if (field.is_string()) return field.get<std::string>();
  if (field.is_array()) {
    for (const auto& entry : field) {
      if (entry.is_object() && entry.value("name", "") == "default" && entry.contains("template") &&
          entry["template"].is_string()) {
        return entry["template"].get<std::string>();
      }
    }
    fail("{}: chat_template is a list without a template named \"default\"", where.string());
  }
  fail("{}: chat_template must be a string or a list of {{name, template}} objects", where.string());
}

std::string template_from_dir(const nlohmann::ordered_json& config, const std::filesystem::path& config_path,
                              const std::filesystem::path& dir) {
  if (config.contains("chat_template") && !config["chat_template"].is_null()) {
    return template_from_field(config["chat_template"], config_path);
  }
  if (std::filesystem::exists(dir / "chat_template.jinja")) return read_file(dir / "chat_template.jinja");
  if (std::filesystem::exists(dir / "chat_template.json")) {
    auto chat_template_json = read_json_file(dir / "chat_template.json");
    if (!chat_template_json.is_object() || !chat_template_json.contains("chat_template")) {
      fail("{}: missing \"chat_template\"", (dir / "chat_template.json").string());
    }
    return template_from_field(chat_template_json["chat_template"], dir / "chat_template.json");
  }
  fail("no chat template in {}: tokenizer_config.json has no \"chat_template\" and there is no chat_template.jinja",
       dir.string());
}

// Whether tokenizer_config.json (`config`, parsed) or a template file of `dir` holds a chat template.
bool has_template(const nlohmann::ordered_json& config, const std::filesystem::path& dir) {
  return (config.is_object() && config.contains("chat_template") && !config["chat_template"].is_null()) ||
         std::filesystem::exists(dir / "chat_template.jinja") || std::filesystem::exists(dir / "chat_template.json");
}

}  // namespace

ChatTemplateInput ChatTemplateInput::from_request(const nlohmann::ordered_json& request) {
  if (!request.is_object()) fail("chat request must be a JSON object, got {}", request.type_name());
  ChatTemplateInput input;
  for (auto it = request.begin(); it != request.end(); ++it) {
    const std::string& key = it.key();
    const auto& value = it.value();
    if (key == "messages") {
      if (!value.is_array()) fail("chat request: \"messages\" must be an array, got {}", value.type_name());
      for (size_t i = 0; i < value.size(); ++i) {
        if (!value[i].is_object()) fail("chat request: messages[{}] must be an object, got {}", i, value[i].type_name());
      }
      input.messages = value;
    } else if (key == "tools") {
      if (!value.is_array() && !value.is_null()) {
        fail("chat request: \"tools\" must be an array or null, got {}", value.type_name());
      }
      input.tools = value;
    } else if (key == "response_format") {
      input.response_format = value;
    } else if (key == "add_generation_prompt") {
      if (!value.is_boolean()) {
        fail("chat request: \"add_generation_prompt\" must be a boolean, got {}", value.type_name());
      }
      input.add_generation_prompt = value.get<bool>();
    } else {
      input.extra_kwargs[key] = value;
    }
  }
  if (!request.contains("messages")) fail("chat request: missing \"messages\"");
  return input;
}

ChatTemplate::ChatTemplate(std::string source, nlohmann::ordered_json special_tokens)
    : source_(std::move(source)), template_(std::in_place, source_) {
  for (auto it = special_tokens.begin(); it != special_tokens.end(); ++it) {
    if (auto text = token_text(it.value())) special_tokens_.set(it.key(), Value(*text));
  }
}

ChatTemplate ChatTemplate::from_tokenizer_dir(const std::filesystem::path& path, const std::string& template_override) {
  std::filesystem::path dir = std::filesystem::is_directory(path) ? path : path.parent_path();
  std::filesystem::path config_path = std::filesystem::is_directory(path) ? dir / "tokenizer_config.json" : path;
  nlohmann::ordered_json config = nlohmann::ordered_json::object();
  if (std::filesystem::exists(config_path)) config = read_json_file(config_path);
  if (!config.is_object()) fail("{}: expected a JSON object", config_path.string());

  if (template_override.empty() && !has_template(config, dir)) {
    if (auto encoding = deepseek_encoding_of_model_dir(dir)) return deepseek(*encoding);
  }
  std::string source = template_override.empty() ? template_from_dir(config, config_path, dir) : template_override;

  nlohmann::ordered_json special_tokens = nlohmann::ordered_json::object();
  for (const char* name : {"bos_token", "eos_token", "unk_token", "pad_token", "sep_token", "cls_token", "mask_token"}) {
    if (config.contains(name)) special_tokens[name] = config[name];
  }
  try {
    return ChatTemplate(std::move(source), std::move(special_tokens));
  } catch (const Error& e) {
    fail("{}: {}", config_path.string(), e.what());
  }
}

std::optional<ChatTemplate> ChatTemplate::from_model_dir(const std::filesystem::path& dir) {
  nlohmann::ordered_json config;
  if (std::filesystem::exists(dir / "tokenizer_config.json")) {
    std::ifstream in(dir / "tokenizer_config.json");
    config = nlohmann::ordered_json::parse(in, nullptr, /*allow_exceptions=*/false);
  }
  if (has_template(config, dir)) return from_tokenizer_dir(dir);
  if (auto encoding = deepseek_encoding_of_model_dir(dir)) return deepseek(*encoding);
  return std::nullopt;
}

ChatTemplate ChatTemplate::deepseek(DeepSeekEncoding encoding) { return ChatTemplate(encoding); }

ChatTemplate::ChatTemplate(DeepSeekEncoding encoding) : deepseek_encoding_(encoding) {}

std::string ChatTemplate::render(const ChatTemplateInput& input) const {
  if (deepseek_encoding_) return render_deepseek_chat(*deepseek_encoding_, input);
  ValueMap variables = special_tokens_;
  variables.set("messages", Value::from_json(input.messages));
  variables.set("tools", input.tools.is_null() ? Value::none() : Value::from_json(input.tools));
  variables.set("documents", Value::none());
  variables.set("add_generation_prompt", Value(input.add_generation_prompt));
  for (auto it = input.extra_kwargs.begin(); it != input.extra_kwargs.end(); ++it) {
    variables.set(it.key(), Value::from_json(it.value()));
  }
  return template_->render(variables);
}

}  // namespace tern::chat
