#include "server/completion_request.h"

#include <limits>

#include "server/api_error.h"

namespace tern::server {

namespace {

constexpr int64_t kMaxLogprobs = 20;  // as vLLM's default max_logprobs

std::vector<int32_t> parse_token_ids(const Json& ids, const std::string& param) {
  std::vector<int32_t> result;
  result.reserve(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    const Json& id = ids[i];
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > std::numeric_limits<int32_t>::max()) {
      fail_param("prompt", "'{}[{}]' must be a non-negative token id, got {}", param, i, id.dump());
    }
    result.push_back(static_cast<int32_t>(id.get<int64_t>()));
  }
  return result;
}

std::vector<PromptInput> parse_prompts(const RequestFields& fields) {
  const Json* prompt = fields.find("prompt");
  if (!prompt) fail_param("prompt", "'prompt' is required");
  if (prompt->is_string()) return {PromptInput{prompt->get<std::string>(), {}}};
  if (!prompt->is_array()) {
    fail_param("prompt", "'prompt' must be a string, a list of strings or a list of token ids, got {}",
               json_type_name(*prompt));
  }
  if (prompt->empty()) fail_param("prompt", "'prompt' must not be an empty list");
  const Json& first = prompt->front();
  if (first.is_number()) return {PromptInput{std::nullopt, parse_token_ids(*prompt, "prompt")}};
  std::vector<PromptInput> prompts;
  for (size_t i = 0; i < prompt->size(); ++i) {
    const Json& item = (*prompt)[i];
    const std::string param = fmt::format("prompt[{}]", i);
    if (first.is_string() && item.is_string()) {
      prompts.push_back({item.get<std::string>(), {}});
    } else if (first.is_array() && item.is_array()) {
      if (item.empty()) fail_param("prompt", "'{}' must not be an empty list", param);
      prompts.push_back({std::nullopt, parse_token_ids(item, param)});
    } else {
      fail_param("prompt", "'{}' is {}, but a prompt list must hold only strings or only token-id lists", param,
                 json_type_name(item));
    }
  }
  return prompts;
}

}  // namespace

CompletionRequest CompletionRequest::parse(const Json& body) {
  RequestFields fields(body);
  CompletionRequest request;
  request.options = parse_generation_options(fields, Endpoint::kCompletions);
  request.prompts = parse_prompts(fields);
  request.echo = fields.boolean("echo").value_or(false);
  request.constraint = parse_output_constraint(fields);
  if (auto value = fields.integer("logprobs", 0, kMaxLogprobs)) request.logprobs = static_cast<int32_t>(*value);
  request.options.sampling.logprobs = request.logprobs;
  if (request.echo && request.logprobs) {
    fail_param("echo", "'echo' together with 'logprobs' needs prompt logprobs, which this server does not compute");
  }
  if (fields.string("suffix")) fail_param("suffix", "'suffix' is not supported");
  if (auto best_of = fields.integer("best_of", 1, kMaxLogprobs); best_of && *best_of != request.options.sampling.n) {
    fail_param("best_of", "'best_of' other than 'n' is not supported");
  }
  return request;
}

}  // namespace tern::server
