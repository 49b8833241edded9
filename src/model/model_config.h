#pragma once
// The fields of a Hugging Face config.json that every decoder shares. Architecture-specific fields (MoE, MLA, ...)
// are read by that architecture's code from `raw`.
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/rope.h"

namespace tern {

struct ModelConfig {
  std::string architecture;  // architectures[0], e.g. "LlamaForCausalLM"
  std::string model_type;
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  bool tie_word_embeddings = false;
  bool attention_bias = false;
  bool mlp_bias = false;
  std::string hidden_act = "silu";
  RopeConfig rope;
  std::vector<int32_t> eos_token_ids;
  int32_t bos_token_id = -1;
  nlohmann::json raw;

  static ModelConfig load(const std::filesystem::path& model_dir);
  static ModelConfig from_json(const nlohmann::json& config, const std::string& origin);
};

}  // namespace tern
