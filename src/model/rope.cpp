#include "model/rope.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "core/error.h"

namespace tern {

namespace {

double number_or(const nlohmann::json& object, const char* key, double fallback) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return fallback;
  if (!it->is_number()) fail("config.json: rope field '{}' must be a number", key);
  return it->get<double>();
}

double yarn_mscale(double scale, double mscale) { return scale <= 1.0 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0; }

}  // namespace

RopeConfig RopeConfig::from_config(const nlohmann::json& config) {
  RopeConfig rope;
  nlohmann::json params = nlohmann::json::object();
  if (auto it = config.find("rope_parameters"); it != config.end() && it->is_object()) {
    params = *it;
  } else if (auto scaling = config.find("rope_scaling"); scaling != config.end() && scaling->is_object()) {
    params = *scaling;
  }
  rope.theta = number_or(params, "rope_theta", number_or(config, "rope_theta", 10000.0));
  std::string type = "default";
  if (auto it = params.find("rope_type"); it != params.end() && it->is_string()) type = *it;
  else if (auto it2 = params.find("type"); it2 != params.end() && it2->is_string()) type = *it2;
  rope.type = type;
  rope.factor = number_or(params, "factor", 1.0);
  rope.factor_given = params.contains("factor") && params["factor"].is_number();
  rope.low_freq_factor = number_or(params, "low_freq_factor", 1.0);
  rope.high_freq_factor = number_or(params, "high_freq_factor", 4.0);
  rope.original_max_position_embeddings =
      static_cast<int64_t>(number_or(params, "original_max_position_embeddings", 0));
  rope.beta_fast = number_or(params, "beta_fast", 32.0);
  rope.beta_slow = number_or(params, "beta_slow", 1.0);
  rope.mscale = number_or(params, "mscale", 0.0);
  rope.mscale_all_dim = number_or(params, "mscale_all_dim", 0.0);
  rope.attention_factor = number_or(params, "attention_factor", 0.0);
  if (auto it = params.find("truncate"); it != params.end() && it->is_boolean()) rope.truncate = *it;
  rope.partial_rotary_factor =
      number_or(params, "partial_rotary_factor", number_or(config, "partial_rotary_factor", 1.0));
  if (type != "default" && type != "linear" && type != "dynamic" && type != "llama3" && type != "yarn") {
    fail("config.json: unsupported rope_type '{}' (supported: default, linear, dynamic, llama3, yarn)", type);
  }
  return rope;
}

RopeFrequencies rope_frequencies(const RopeConfig& rope, int rotary_dim, int64_t max_position_embeddings) {
  if (rotary_dim <= 0 || rotary_dim % 2 != 0) fail("rope: rotary dimension {} must be positive and even", rotary_dim);
  const int half = rotary_dim / 2;
  RopeFrequencies out;
  out.inv_freq.resize(half);
  std::vector<double> base(half);
  for (int i = 0; i < half; ++i) base[i] = 1.0 / std::pow(rope.theta, (2.0 * i) / rotary_dim);

  if (rope.type == "default" || rope.type == "dynamic") {
    // Dynamic NTK scaling changes frequencies only past max_position_embeddings, which requests never reach here.
    for (int i = 0; i < half; ++i) out.inv_freq[i] = static_cast<float>(base[i]);
  } else if (rope.type == "linear") {
    for (int i = 0; i < half; ++i) out.inv_freq[i] = static_cast<float>(base[i] / rope.factor);
  } else if (rope.type == "llama3") {
    const double old_len = static_cast<double>(rope.original_max_position_embeddings);
    const double low_wavelen = old_len / rope.low_freq_factor;
    const double high_wavelen = old_len / rope.high_freq_factor;
    for (int i = 0; i < half; ++i) {
      const double wavelen = 2.0 * std::numbers::pi / base[i];
      double freq = wavelen > low_wavelen ? base[i] / rope.factor : base[i];
      if (!(wavelen < high_wavelen) && !(wavelen > low_wavelen)) {
        const double smooth = (old_len / wavelen - rope.low_freq_factor) / (rope.high_freq_factor - rope.low_freq_factor);
        freq = (1.0 - smooth) * freq / rope.factor + smooth * freq;
      }
      out.inv_freq[i] = static_cast<float>(freq);
    }
  } else {  // yarn
    // transformers 5 takes `factor` as given and derives it from max_position_embeddings /
    // original_max_position_embeddings only when the config leaves it out.
    double factor = rope.factor;
    int64_t original_len = rope.original_max_position_embeddings;
    if (original_len <= 0) original_len = max_position_embeddings;
    if (!rope.factor_given) factor = static_cast<double>(max_position_embeddings) / static_cast<double>(original_len);
    double attention_factor = rope.attention_factor;
    if (attention_factor == 0.0) {
      attention_factor = (rope.mscale != 0.0 && rope.mscale_all_dim != 0.0)
                             ? yarn_mscale(factor, rope.mscale) / yarn_mscale(factor, rope.mscale_all_dim)
                             : yarn_mscale(factor, 1.0);
    }
    auto correction_dim = [&](double rotations) {
      return rotary_dim * std::log(static_cast<double>(original_len) / (rotations * 2.0 * std::numbers::pi)) /
             (2.0 * std::log(rope.theta));
    };
    double low = correction_dim(rope.beta_fast);
    double high = correction_dim(rope.beta_slow);
    if (rope.truncate) {
      low = std::floor(low);
      high = std::ceil(high);
    }
    low = std::max(low, 0.0);
    high = std::min(high, static_cast<double>(rotary_dim - 1));
    if (low == high) high += 0.001;
    for (int i = 0; i < half; ++i) {
      const double ramp = std::clamp((i - low) / (high - low), 0.0, 1.0);
      const double extrapolation_weight = 1.0 - ramp;
      const double interpolated = base[i] / factor;
      out.inv_freq[i] = static_cast<float>(interpolated * (1.0 - extrapolation_weight) + base[i] * extrapolation_weight);
    }
    out.attention_scaling = static_cast<float>(attention_factor);
  }
  return out;
}

}  // namespace tern
