#pragma once
// Rotary position embedding parameters and their inverse frequencies, as transformers' ROPE_INIT_FUNCTIONS define
// them (default, linear, dynamic at its base length, llama3, yarn). The frequencies are float32 whatever the
// weights' dtype: transformers' from_pretrained keeps its inv_freq buffer float32 (only nn.Module.to(bfloat16) would
// round it, which at long contexts turns a 2^-9 frequency error into radians of phase), and vLLM computes them in
// float32 too.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace tern {

struct RopeConfig {
  std::string type = "default";
  double theta = 10000.0;
  double factor = 1.0;
  bool factor_given = false;  // whether the config names `factor` (yarn derives it otherwise)
  // llama3
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  // llama3 and yarn; 0 when the config does not name it
  int64_t original_max_position_embeddings = 0;
  // yarn
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  double mscale = 0.0;
  double mscale_all_dim = 0.0;
  double attention_factor = 0.0;  // 0: derived from factor and mscale
  bool truncate = true;
  double partial_rotary_factor = 1.0;

  // Reads `rope_parameters` (transformers 5) or `rope_theta` + `rope_scaling` (transformers 4) from config.json.
  static RopeConfig from_config(const nlohmann::json& config);
};

struct RopeFrequencies {
  std::vector<float> inv_freq;    // [rotary_dim / 2]
  float attention_scaling = 1.0f;  // cos and sin are multiplied by it (yarn)
};

// rotary_dim: how many leading dimensions of a head rotate; max_position_embeddings: the model's context length.
RopeFrequencies rope_frequencies(const RopeConfig& rope, int rotary_dim, int64_t max_position_embeddings);

}  // namespace tern
