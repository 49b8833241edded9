#include "model/model_config.h"

#include <fstream>

#include "core/error.h"

namespace tern {

namespace {

template <typename T>
T field(const nlohmann::json& config, const char* key, const std::string& origin) {
  auto it = config.find(key);
  if (it == config.end() || it->is_null()) fail("{}: missing field '{}'", origin, key);
  try {
    return it->get<T>();
  } catch (const nlohmann::json::exception&) {
    fail("{}: field '{}' has the wrong type ({})", origin, key, it->type_name());
  }
}

template <typename T>
T field_or(const nlohmann::json& config, const char* key, T fallback, const std::string& origin) {
  auto it = config.find(key);
  if (it == config.end() || it->is_null()) return fallback;
  return field<T>(config, key, origin);
}

}  // namespace

ModelConfig ModelConfig::from_json(const nlohmann::json& config, const std::string& origin) {
  if (!config.is_object()) fail("{}: not a JSON object", origin);
  ModelConfig c;
  c.raw = config;
  const auto architectures = field_or<std::vector<std::string>>(config, "architectures", {}, origin);
  if (architectures.empty()) fail("{}: 'architectures' is missing or empty", origin);
  c.architecture = architectures[0];
  c.model_type = field_or<std::string>(config, "model_type", "", origin);
  c.vocab_size = field<int64_t>(config, "vocab_size", origin);
  c.hidden_size = field<int64_t>(config, "hidden_size", origin);
  c.intermediate_size = field_or<int64_t>(config, "intermediate_size", 0, origin);
  c.num_layers = field<int64_t>(config, "num_hidden_layers", origin);
  c.num_heads = field<int64_t>(config, "num_attention_heads", origin);
  c.num_kv_heads = field_or<int64_t>(config, "num_key_value_heads", c.num_heads, origin);
  if (c.num_heads <= 0 || c.hidden_size <= 0 || c.num_layers <= 0 || c.vocab_size <= 0 || c.num_kv_heads <= 0) {
    fail("{}: sizes must be positive", origin);
  }
  c.head_dim = field_or<int64_t>(config, "head_dim", c.hidden_size / c.num_heads, origin);
  if (c.num_heads % c.num_kv_heads != 0) {
    fail("{}: num_attention_heads {} is not a multiple of num_key_value_heads {}", origin, c.num_heads,
         c.num_kv_heads);
  }
  c.max_position_embeddings = field_or<int64_t>(config, "max_position_embeddings", 4096, origin);
  c.rms_norm_eps = field_or<double>(config, "rms_norm_eps", 1e-6, origin);
  c.tie_word_embeddings = field_or<bool>(config, "tie_word_embeddings", false, origin);
  c.attention_bias = field_or<bool>(config, "attention_bias", false, origin);
  c.mlp_bias = field_or<bool>(config, "mlp_bias", false, origin);
  c.hidden_act = field_or<std::string>(config, "hidden_act", "silu", origin);
  c.rope = RopeConfig::from_config(config);
  if (auto it = config.find("eos_token_id"); it != config.end()) {
    if (it->is_number_integer()) c.eos_token_ids.push_back(it->get<int32_t>());
    else if (it->is_array()) c.eos_token_ids = it->get<std::vector<int32_t>>();
  }
  c.bos_token_id = field_or<int32_t>(config, "bos_token_id", -1, origin);
  return c;
}

ModelConfig ModelConfig::load(const std::filesystem::path& model_dir) {
  const auto path = model_dir / "config.json";
  std::ifstream in(path);
  if (!in) fail("{}: cannot open", path.string());
  nlohmann::json config;
  try {
    config = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    fail("{}: malformed JSON: {}", path.string(), e.what());
  }
  return from_json(config, path.string());
}

}  // namespace tern
