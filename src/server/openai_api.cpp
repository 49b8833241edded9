#include "server/openai_api.h"

#include <ctime>
#include <random>

#include "core/error.h"
#include "engine/request_field_error.h"
#include "server/bearer_auth.h"
#include "server/chat_request.h"
#include "server/chat_response.h"
#include "server/completion_request.h"
#include "server/completion_response.h"
#include "server/reasoning_constraint.h"
#include "server/request_body.h"

namespace tern::server {

namespace {

ApiError not_ready() { return ApiError(503, "the model is still loading", std::nullopt, "model_loading"); }

std::vector<int32_t> encode_prompt(const ServingModel& model, const std::string& text, bool add_special_tokens,
                                   const char* param) {
  if (text.size() > model.max_prompt_text_bytes()) {
    throw ApiError(400, fmt::format("This model's maximum context length is {} tokens, and the {} of {} bytes is "
                                    "longer than any text of that many tokens.",
                                    model.max_model_len(), param, text.size()),
                   param, "context_length_exceeded");
  }
  try {
    return model.tokenizer().encode(text, add_special_tokens);
  } catch (const Error& e) {
    throw ApiError(400, fmt::format("cannot tokenize the {}: {}", param, e.what()), param);
  }
}

std::string render_chat(const chat::ChatTemplate* chat_template, const ChatRequest& request) {
  if (!chat_template) {
    throw ApiError(400, "this model has no chat template (tokenizer_config.json has no chat_template); use "
                        "/v1/completions", "messages");
  }
  try {
    return chat_template->render(request.template_input());
  } catch (const Error& e) {
    throw ApiError(400, fmt::format("the chat template rejected the conversation: {}", e.what()), "messages");
  }
}

constexpr std::string_view kModelsPath = "/v1/models";
constexpr std::string_view kModelPathPrefix = "/v1/models/";

bool is_model_path(const std::string& path) { return path.rfind(kModelPathPrefix, 0) == 0; }

int hex_digit_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// A path segment with its %XX escapes decoded: clients escape a model name's '/' as %2F. A '%' that starts no
// escape stays as it is.
std::string percent_decoded(std::string_view text) {
  std::string decoded;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '%' && i + 2 < text.size() && hex_digit_value(text[i + 1]) >= 0 &&
        hex_digit_value(text[i + 2]) >= 0) {
      decoded += static_cast<char>(hex_digit_value(text[i + 1]) * 16 + hex_digit_value(text[i + 2]));
      i += 2;
    } else {
      decoded += text[i];
    }
  }
  return decoded;
}

}  // namespace

ApiError PreparedGeneration::rejection(const Error& error, size_t prompt_index) const {
  std::string param = prompt_param;
  if (const auto* field_error = dynamic_cast<const RequestFieldError*>(&error)) {
    // The engine's field names are the API's, but for the prompt and the stop strings.
    if (field_error->field() == "stop_strings") {
      param = "stop";
    } else if (field_error->field() != "prompt_token_ids") {
      param = field_error->field();
    }
  }
  if (param == prompt_param && requests.size() > 1) param = fmt::format("{}[{}]", prompt_param, prompt_index);
  return ApiError(400, error.what(), param);
}

std::string random_hex_id() {
  thread_local std::mt19937_64 generator(std::random_device{}());
  return fmt::format("{:016x}{:016x}", generator(), generator());
}

OpenAiApi::OpenAiApi(ApiConfig config, ServerMetrics& metrics)
    : config_(std::move(config)), metrics_(metrics), created_(static_cast<int64_t>(std::time(nullptr))) {}

bool OpenAiApi::is_cheap(const ApiRequest& request) {
  return request.path == "/health" || request.path == "/metrics" || request.path == kModelsPath ||
         is_model_path(request.path);
}

ApiResult OpenAiApi::handle(const ApiRequest& request) const {
  try {
    return route(request, model_.load());
  } catch (const ApiError& e) {
    return HttpReply::error(e);
  } catch (const Error& e) {
    return HttpReply::error(ApiError(400, e.what()));
  } catch (const std::exception& e) {
    return HttpReply::error(ApiError(500, fmt::format("internal error: {}", e.what())));
  }
}

ApiResult OpenAiApi::route(const ApiRequest& request, ServingModel* model) const {
  const std::string& path = request.path;
  const auto expect_method = [&](const char* method) {
    if (request.method != method) {
      throw ApiError(405, fmt::format("{} takes {} requests, not {}", path, method, request.method));
    }
  };
  if (path == "/health") {
    expect_method("GET");
    return health();
  }
  if (path == "/metrics") {
    if (!config_.metrics_without_auth) check_api_key(request);
    expect_method("GET");
    return metrics(model);
  }
  const bool model_path = is_model_path(path);
  const bool known = path == kModelsPath || model_path || path == "/v1/completions" || path == "/v1/chat/completions" ||
                     path == "/tokenize" || path == "/detokenize";
  if (!known) throw ApiError(404, fmt::format("no endpoint {} {}", request.method, path), std::nullopt, "not_found");
  check_api_key(request);
  expect_method(path == kModelsPath || model_path ? "GET" : "POST");
  if (!model) throw not_ready();
  if (path == kModelsPath) return models(*model);
  if (model_path) return model_card(percent_decoded(std::string_view(path).substr(kModelPathPrefix.size())), *model);
  if (path == "/tokenize") return tokenize(request, *model);
  if (path == "/detokenize") return detokenize(request, *model);
  PreparedGeneration generation =
      path == "/v1/completions" ? completions(request, *model) : chat_completions(request, *model);
  if (generation_hook_) {
    if (auto answered = generation_hook_(request, generation)) return std::move(*answered);
  }
  return generation;
}

void OpenAiApi::check_api_key(const ApiRequest& request) const {
  if (config_.api_key) require_bearer_key(request.authorization, *config_.api_key);
}

void OpenAiApi::check_model_name(const std::optional<std::string>& requested) const {
  if (requested && *requested != config_.served_model_name) {
    throw ApiError(404, fmt::format("the model '{}' does not exist; this server serves '{}'", *requested,
                                    config_.served_model_name),
                   "model", "model_not_found");
  }
}

void OpenAiApi::check_num_sequences(size_t num_prompts, int32_t n) const {
  const auto num_sequences = static_cast<int64_t>(num_prompts) * n;
  if (num_sequences > config_.max_sequences_per_request) {
    throw ApiError(400, fmt::format("this request asks for {} sequences ({} prompts x n = {}), more than the {} this "
                                    "server allows per request (--max-sequences-per-request)",
                                    num_sequences, num_prompts, n, config_.max_sequences_per_request),
                   num_prompts > 1 ? "prompt" : "n");
  }
}

// vLLM's check and wording: the prompt plus the tokens asked for must fit the context.
void OpenAiApi::check_length(size_t num_prompt_tokens, const std::optional<int32_t>& max_tokens, int64_t max_model_len,
                             const char* where) const {
  const auto prompt_len = static_cast<int64_t>(num_prompt_tokens);
  if (prompt_len >= max_model_len || (max_tokens && prompt_len + *max_tokens > max_model_len)) {
    throw ApiError(400,
                   fmt::format("This model's maximum context length is {} tokens. However, you requested {} tokens "
                               "({} in the {}, {} for the completion). Please reduce the length of the {} or the "
                               "completion.",
                               max_model_len, prompt_len + max_tokens.value_or(0), prompt_len, where,
                               max_tokens.value_or(0), where),
                   where, "context_length_exceeded");
  }
}

ResponseContext OpenAiApi::response_context(const std::string& id_prefix, const ApiRequest& request,
                                            const GenerationOptions& options, size_t num_prompts) const {
  ResponseContext context;
  context.id = id_prefix + request.request_id;
  context.model_name = config_.served_model_name;
  context.created = static_cast<int64_t>(std::time(nullptr));
  context.stream = options.stream;
  context.include_usage = options.include_usage;
  context.n = options.sampling.n;
  context.num_prompts = num_prompts;
  context.tokens_as_ids = options.tokens_as_ids;
  return context;
}

HttpReply OpenAiApi::health() const {
  if (!ready()) return HttpReply::error(not_ready());
  return {200, "application/json", ""};
}

HttpReply OpenAiApi::metrics(ServingModel* model) const {
  std::optional<EngineStats> stats;
  std::optional<GrammarCacheStats> grammars;
  if (model) {
    stats = model->engine().stats();
    const grammar::GrammarCache& cache = model->grammars();
    grammars = GrammarCacheStats{cache.memory_bytes(), cache.max_bytes(), cache.size(), cache.num_evictions(),
                                 cache.num_hits(), cache.num_misses()};
  }
  return {200, "text/plain; version=0.0.4; charset=utf-8", metrics_.render(stats, grammars)};
}

Json OpenAiApi::model_json(const ServingModel& model) const {
  return {{"id", config_.served_model_name}, {"object", "model"}, {"created", created_}, {"owned_by", "tern"},
          {"root", config_.model_dir}, {"parent", nullptr}, {"max_model_len", model.max_model_len()}};
}

HttpReply OpenAiApi::models(ServingModel& model) const {
  return HttpReply::json({{"object", "list"}, {"data", Json::array({model_json(model)})}});
}

HttpReply OpenAiApi::model_card(const std::string& id, const ServingModel& model) const {
  check_model_name(id);
  return HttpReply::json(model_json(model));
}

HttpReply OpenAiApi::tokenize(const ApiRequest& request, ServingModel& model) const {
  const Json body = parse_request_body(request.body);
  RequestFields fields(body);
  check_model_name(fields.string("model"));
  std::vector<int32_t> ids;
  if (fields.find("messages")) {
    ChatRequest chat = ChatRequest::parse(body);
    const std::string prompt = render_chat(model.chat_template(), chat);
    ids = encode_prompt(model, prompt, fields.boolean("add_special_tokens").value_or(false), "messages");
  } else {
    const auto prompt = fields.string("prompt");
    if (!prompt) fail_param("prompt", "'prompt' (a string) or 'messages' is required");
    ids = encode_prompt(model, *prompt, fields.boolean("add_special_tokens").value_or(true), "prompt");
  }
  Json token_strs = nullptr;
  if (fields.boolean("return_token_strs").value_or(false)) {
    token_strs = Json::array();
    for (int32_t id : ids) token_strs.push_back(model.tokenizer().token_string(id));
  }
  return HttpReply::json({{"count", ids.size()}, {"max_model_len", model.max_model_len()}, {"tokens", ids},
                          {"token_strs", std::move(token_strs)}});
}

HttpReply OpenAiApi::detokenize(const ApiRequest& request, ServingModel& model) const {
  const Json body = parse_request_body(request.body);
  RequestFields fields(body);
  check_model_name(fields.string("model"));
  const Json* tokens = fields.find("tokens");
  if (!tokens) fail_param("tokens", "'tokens' is required");
  if (!tokens->is_array()) fail_param("tokens", "'tokens' must be a list of token ids, got {}", json_type_name(*tokens));
  std::vector<int32_t> ids;
  const int64_t vocab_size = model.tokenizer().vocab_size();
  for (size_t i = 0; i < tokens->size(); ++i) {
    const Json& id = tokens->at(i);
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= vocab_size) {
      fail_param("tokens", "'tokens[{}]' must be a token id in [0, {}), got {}", i, vocab_size, id.dump());
    }
    ids.push_back(static_cast<int32_t>(id.get<int64_t>()));
  }
  return HttpReply::json({{"prompt", model.tokenizer().decode(ids, /*skip_special_tokens=*/false)}});
}

PreparedGeneration OpenAiApi::completions(const ApiRequest& request, ServingModel& model) const {
  CompletionRequest parsed = CompletionRequest::parse(parse_request_body(request.body));
  check_model_name(parsed.options.model);
  check_num_sequences(parsed.prompts.size(), parsed.options.sampling.n);
  const uint64_t admission_group = next_admission_group_++;
  const Tokenizer& tokenizer = model.tokenizer();
  std::vector<std::string> echo_texts;
  PreparedGeneration generation;
  generation.engine = &model.engine();
  for (auto& prompt : parsed.prompts) {
    if (prompt.text) prompt.token_ids = encode_prompt(model, *prompt.text, /*add_special_tokens=*/true, "prompt");
    check_length(prompt.token_ids.size(), parsed.options.stop.max_tokens, model.max_model_len(), "prompt");
    if (parsed.echo) echo_texts.push_back(prompt.text ? *prompt.text : tokenizer.decode(prompt.token_ids, false));
    generation.requests.push_back({prompt.token_ids, parsed.options.sampling, parsed.options.stop});
    generation.requests.back().admission_group = admission_group;
  }
  if (parsed.constraint) {
    const auto constraint = compile_constraint(model.grammars(), *parsed.constraint);
    for (auto& engine_request : generation.requests) engine_request.sampling.constraint = constraint;
  }
  generation.response = std::make_unique<CompletionResponse>(
      response_context("cmpl-", request, parsed.options, parsed.prompts.size()),
      std::move(echo_texts), parsed.logprobs.has_value(), tokenizer);
  return generation;
}

PreparedGeneration OpenAiApi::chat_completions(const ApiRequest& request, ServingModel& model) const {
  ChatRequest parsed = ChatRequest::parse(parse_request_body(request.body));
  check_model_name(parsed.options.model);
  check_num_sequences(1, parsed.options.sampling.n);
  const std::string prompt = render_chat(model.chat_template(), parsed);
  std::vector<int32_t> ids = encode_prompt(model, prompt, /*add_special_tokens=*/false, "messages");
  check_length(ids.size(), parsed.options.stop.max_tokens, model.max_model_len(), "messages");
  chat::ChatOutputOptions parser_options = model.output_options(prompt);
  if (!parsed.parse_tool_calls) parser_options.tool_call_parser.clear();
  parser_options.tool_schemas = chat::tool_parameter_schemas(parsed.tools);
  std::optional<ReasoningEndMarker> constraint_after;
  if (parsed.constraint && (parsed.constraint->kind == grammar::GrammarKind::kJsonSchema ||
                            parsed.constraint->kind == grammar::GrammarKind::kJsonObject)) {
    // A JSON output (response_format, guided_json) is the answer: nothing in it is read again as reasoning or as a
    // tool call, so a "<think>" inside a JSON string stays in the string. With a reasoning parser the model reasons
    // first, unconstrained, and the grammar starts after the end of its reasoning, which the reasoning parser splits
    // off (starting in reasoning, as the engine does); without one, or with enable_in_reasoning, the JSON is the
    // output from its first token. A regex or grammar may spell a model's own format (harmony channels, <think>),
    // which the parsers still read, from the first token.
    if (!config_.structured_outputs_in_reasoning) {
      constraint_after = constraint_start_after_reasoning(parser_options, prompt, model.tokenizer());
    }
    if (constraint_after) {
      parser_options.prompt_opens_think = true;
    } else {
      parser_options.reasoning_parser.clear();
    }
    parser_options.tool_call_parser.clear();
  }
  if (parsed.force_tool_call) {
    // The grammar writes the calls from the first token, also where the prompt opened a reasoning block (DeepSeek's
    // and Qwen3's thinking modes) or the format starts in reasoning (R1): the output is calls, with no reasoning.
    parser_options.reasoning_parser.clear();
    parser_options.prompt_opens_think = false;
    parsed.constraint = tool_call_constraint(parsed.tools, parsed.forced_function, parser_options.tool_call_parser);
  }
  parsed.options.stop.skip_special_tokens = !parser_options.keeps_special_tokens();
  if (parsed.constraint) {
    parsed.options.sampling.constraint = compile_constraint(model.grammars(), *parsed.constraint);
    parsed.options.sampling.constraint_after = std::move(constraint_after);
  }

  PreparedGeneration generation;
  generation.engine = &model.engine();
  generation.prompt_param = "messages";
  generation.requests.push_back({std::move(ids), parsed.options.sampling, parsed.options.stop});
  generation.response = std::make_unique<ChatResponse>(
      response_context("chatcmpl-", request, parsed.options, 1),
      std::move(parser_options), parsed.top_logprobs.has_value(), model.tokenizer());
  return generation;
}

}  // namespace tern::server
