#include "engine/speculative_config.h"

#include <nlohmann/json.hpp>
#include <optional>

#include "core/error.h"

namespace tern {

namespace {

int32_t positive_int(const nlohmann::json& value, const char* key, int32_t max) {
  if (!value.is_number_integer() || value.get<int64_t>() < 1 || value.get<int64_t>() > max) {
    fail("--speculative-config: {} must be an integer in [1, {}], got {}", key, max, value.dump());
  }
  return value.get<int32_t>();
}

}  // namespace

std::string_view speculative_method_name(SpeculativeMethod method) {
  switch (method) {
    case SpeculativeMethod::kNgram: return "ngram";
    case SpeculativeMethod::kDraftModel: return "draft_model";
    case SpeculativeMethod::kDeepseekMtp: return "deepseek_mtp";
    case SpeculativeMethod::kEagle3: return "eagle3";
  }
  return "unknown";
}

SpeculativeConfig parse_speculative_config(std::string_view json_text) {
  const auto json = nlohmann::json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded() || !json.is_object()) {
    fail("--speculative-config: '{}' is not a JSON object (expected e.g. '{{\"method\": \"ngram\", "
         "\"num_speculative_tokens\": 3}}')", json_text);
  }
  SpeculativeConfig config;
  std::string method;
  std::optional<int32_t> lookup_min, lookup_max;
  for (const auto& [key, value] : json.items()) {
    if (key == "method") {
      if (!value.is_string()) fail("--speculative-config: method must be a string, got {}", value.dump());
      method = value.get<std::string>();
    } else if (key == "num_speculative_tokens") {
      config.num_speculative_tokens = positive_int(value, "num_speculative_tokens", kMaxSpeculativeTokens);
    } else if (key == "prompt_lookup_min") {
      lookup_min = positive_int(value, "prompt_lookup_min", 1024);
    } else if (key == "prompt_lookup_max") {
      lookup_max = positive_int(value, "prompt_lookup_max", 1024);
    } else if (key == "model") {
      if (!value.is_string() || value.get<std::string>().empty()) {
        fail("--speculative-config: model must be a directory, got {}", value.dump());
      }
      config.draft_model_dir = value.get<std::string>();
    } else if (key == "quantization") {
      if (value.is_null()) continue;
      if (!value.is_string()) fail("--speculative-config: quantization must be a string, got {}", value.dump());
      config.quantization = parse_online_quantization(value.get<std::string>(), "--speculative-config");
    } else {
      fail("--speculative-config: unknown key '{}' (tern reads method, num_speculative_tokens, prompt_lookup_min, "
           "prompt_lookup_max, model and quantization)", key);
    }
  }
  if (method.empty()) method = config.draft_model_dir.empty() ? "" : "draft_model";
  if (method == "ngram") {
    config.method = SpeculativeMethod::kNgram;
    if (!config.draft_model_dir.empty()) fail("--speculative-config: method ngram takes no model");
  } else if (method == "draft_model") {
    config.method = SpeculativeMethod::kDraftModel;
    if (config.draft_model_dir.empty()) fail("--speculative-config: method draft_model needs \"model\": a directory");
  } else if (method == "deepseek_mtp" || method == "mtp") {
    config.method = SpeculativeMethod::kDeepseekMtp;
  } else if (method == "eagle3") {
    config.method = SpeculativeMethod::kEagle3;
    if (config.draft_model_dir.empty()) fail("--speculative-config: method eagle3 needs \"model\": the head's directory");
  } else if (method.empty()) {
    fail("--speculative-config: give a method (\"ngram\") or a draft model (\"model\": DIR)");
  } else {
    fail("--speculative-config: unknown method '{}' (tern has ngram, draft_model, deepseek_mtp and eagle3)", method);
  }
  if (config.num_speculative_tokens == 0) fail("--speculative-config: num_speculative_tokens is required");
  // vLLM's defaults: each bound the other where only one is given, 5 where neither is.
  config.prompt_lookup_min = lookup_min.value_or(lookup_max.value_or(5));
  config.prompt_lookup_max = lookup_max.value_or(lookup_min.value_or(5));
  if (config.quantization && config.method == SpeculativeMethod::kNgram) {
    fail("--speculative-config: method ngram has no weights to quantize");
  }
  if (config.prompt_lookup_min > config.prompt_lookup_max) {
    fail("--speculative-config: prompt_lookup_min {} is more than prompt_lookup_max {}", config.prompt_lookup_min,
         config.prompt_lookup_max);
  }
  return config;
}

OnlineQuantization drafter_quantization(const SpeculativeConfig& config, OnlineQuantization target) {
  if (config.quantization) return *config.quantization;
  return config.method == SpeculativeMethod::kDeepseekMtp ? target : OnlineQuantization::none;
}

}  // namespace tern
