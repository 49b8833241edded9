#include "server/generation_options.h"

#include <charconv>
#include <limits>

#include "server/api_error.h"

namespace tern::server {

namespace {

constexpr int64_t kMaxInt32 = std::numeric_limits<int32_t>::max();
constexpr int64_t kMaxChoices = 128;  // OpenAI's limit on n

std::vector<std::pair<int32_t, float>> parse_logit_bias(const RequestFields& fields) {
  const Json* bias = fields.find("logit_bias");
  if (!bias) return {};
  if (!bias->is_object()) {
    fail_param("logit_bias", "'logit_bias' must be an object mapping token ids to biases, got {}", json_type_name(*bias));
  }
  std::vector<std::pair<int32_t, float>> result;
  for (auto it = bias->begin(); it != bias->end(); ++it) {
    const std::string& key = it.key();
    int32_t token = -1;
    const auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), token);
    if (ec != std::errc() || end != key.data() + key.size() || token < 0) {
      fail_param("logit_bias", "'logit_bias' key '{}' is not a token id", key);
    }
    if (!it->is_number()) {
      fail_param("logit_bias", "'logit_bias[{}]' must be a number, got {}", key, json_type_name(*it));
    }
    const double value = it->get<double>();
    if (!(value >= -100.0 && value <= 100.0)) {
      fail_param("logit_bias", "'logit_bias[{}]' is {}, outside [-100, 100]", key, value);
    }
    result.emplace_back(token, static_cast<float>(value));
  }
  return result;
}

std::vector<int32_t> parse_stop_token_ids(const RequestFields& fields) {
  const Json* ids = fields.find("stop_token_ids");
  if (!ids) return {};
  if (!ids->is_array()) fail_param("stop_token_ids", "'stop_token_ids' must be a list of integers, got {}", json_type_name(*ids));
  std::vector<int32_t> result;
  for (size_t i = 0; i < ids->size(); ++i) {
    const Json& id = (*ids)[i];
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > kMaxInt32) {
      fail_param("stop_token_ids", "'stop_token_ids[{}]' must be a token id, got {}", i, id.dump());
    }
    result.push_back(static_cast<int32_t>(id.get<int64_t>()));
  }
  return result;
}

}  // namespace

GenerationOptions parse_generation_options(const RequestFields& fields, Endpoint endpoint) {
  GenerationOptions options;
  options.model = fields.string("model");

  auto& sampling = options.sampling;
  if (auto value = fields.number("temperature", 0.0, 2.0)) sampling.temperature = static_cast<float>(*value);
  if (auto value = fields.number("top_p", 0.0, 1.0)) {
    if (*value == 0.0) fail_param("top_p", "'top_p' must be greater than 0");
    sampling.top_p = static_cast<float>(*value);
  }
  // vLLM spells "no top-k" as -1; the engine as 0.
  if (auto value = fields.integer("top_k", -1, kMaxInt32)) sampling.top_k = *value < 0 ? 0 : static_cast<int32_t>(*value);
  if (auto value = fields.number("min_p", 0.0, 1.0)) sampling.min_p = static_cast<float>(*value);
  if (auto value = fields.number("presence_penalty", -2.0, 2.0)) sampling.presence_penalty = static_cast<float>(*value);
  if (auto value = fields.number("frequency_penalty", -2.0, 2.0)) sampling.frequency_penalty = static_cast<float>(*value);
  if (auto value = fields.number("repetition_penalty", 0.0, 100.0)) {
    if (*value == 0.0) fail_param("repetition_penalty", "'repetition_penalty' must be greater than 0");
    sampling.repetition_penalty = static_cast<float>(*value);
  }
  if (auto value = fields.integer("n", 1, kMaxChoices)) sampling.n = static_cast<int32_t>(*value);
  if (auto value = fields.integer("seed", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max())) {
    sampling.seed = static_cast<uint64_t>(*value);
  }
  sampling.logit_bias = parse_logit_bias(fields);

  auto& stop = options.stop;
  std::optional<int64_t> max_tokens = fields.integer("max_tokens", 1, kMaxInt32);
  if (endpoint == Endpoint::kChatCompletions) {
    // The newer name wins, as in OpenAI's API.
    if (auto value = fields.integer("max_completion_tokens", 1, kMaxInt32)) max_tokens = value;
  } else if (!max_tokens) {
    max_tokens = 16;  // OpenAI's default for completions
  }
  if (max_tokens) stop.max_tokens = static_cast<int32_t>(*max_tokens);
  stop.stop_strings = fields.string_or_strings("stop");
  for (const auto& text : stop.stop_strings) {
    if (text.empty()) fail_param("stop", "'stop' strings must not be empty");
  }
  stop.stop_token_ids = parse_stop_token_ids(fields);
  stop.ignore_eos = fields.boolean("ignore_eos").value_or(false);

  options.tokens_as_ids = fields.boolean("return_tokens_as_token_ids").value_or(false);
  options.stream = fields.boolean("stream").value_or(false);
  if (const Json* stream_options = fields.find("stream_options")) {
    if (!options.stream) fail_param("stream_options", "'stream_options' is only allowed when 'stream' is true");
    RequestFields stream_fields(*stream_options, "stream_options.");
    options.include_usage = stream_fields.boolean("include_usage").value_or(false);
  }
  return options;
}

}  // namespace tern::server
