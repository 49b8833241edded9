#pragma once
// The HTTP API without the HTTP: routes a request (method, path, body) to its endpoint and answers with a reply,
// or, for the generation endpoints, with the engine requests to submit and the response builder to feed.
// Tokenization and chat-template rendering happen here, so callers run handle() off the I/O threads.
#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "core/error.h"
#include "engine/request.h"
#include "server/generation_options.h"
#include "server/generation_response.h"
#include "server/http_reply.h"
#include "server/metrics.h"
#include "server/serving_model.h"

namespace tern::server {

inline constexpr int64_t kDefaultMaxSequencesPerRequest = 256;

struct ApiConfig {
  std::string served_model_name;
  std::string model_dir;               // reported as the model's root
  std::optional<std::string> api_key;  // required as "Authorization: Bearer <key>" on all but /health
  bool metrics_without_auth = false;   // /metrics answers without the api_key
  // The most sequences (prompts x n) one generation request may ask for; more is refused with 400 before any work.
  int64_t max_sequences_per_request = kDefaultMaxSequencesPerRequest;
  // vLLM's structured_outputs_config.enable_in_reasoning: a chat output's JSON constraint applies from the first
  // token, over the reasoning too; false: after the reasoning, where a reasoning parser reads it (see
  // reasoning_constraint.h).
  bool structured_outputs_in_reasoning = false;
};

struct ApiRequest {
  std::string method;  // "GET", "POST", ...
  std::string path;    // without the query string
  std::string body;
  std::string authorization;  // the Authorization header, if any
  std::string request_id;     // the x-request-id of the exchange
};

// What a generation endpoint hands the connection: submit `requests` (one per prompt, in order) to `engine` and
// feed their outputs to `response`.
struct PreparedGeneration {
  Engine* engine = nullptr;
  std::vector<GenerateRequest> requests;
  std::unique_ptr<GenerationResponse> response;
  std::string prompt_param = "prompt";  // the request field the prompts came from, as the client spelled it

  // The 400 for an engine that refused requests[prompt_index] at submit: the parameter is the field the engine
  // named (a RequestFieldError) as the client spells it; a refusal of anything else is about the prompt.
  ApiError rejection(const Error& error, size_t prompt_index) const;
};

using ApiResult = std::variant<HttpReply, PreparedGeneration>;

// Sees each prepared generation before the connection gets it and may answer in its place (nullopt: serve as
// usual). Prefill/decode disaggregation's prefill role uses it (src/disagg).
using GenerationHook = std::function<std::optional<ApiResult>(const ApiRequest&, PreparedGeneration&)>;

class OpenAiApi {
 public:
  OpenAiApi(ApiConfig config, ServerMetrics& metrics);

  // The model is loaded: generation endpoints and /health start answering. `model` outlives the API's use.
  void set_model(ServingModel* model) { model_.store(model); }
  bool ready() const { return model_.load() != nullptr; }
  // Set before set_model (requests read it without a lock).
  void set_generation_hook(GenerationHook hook) { generation_hook_ = std::move(hook); }

  // Never throws: every failure becomes an error reply in OpenAI's shape.
  ApiResult handle(const ApiRequest& request) const;
  // Whether handle() for this request is cheap enough to run on an I/O thread (no tokenization or rendering).
  static bool is_cheap(const ApiRequest& request);

 private:
  ApiResult route(const ApiRequest& request, ServingModel* model) const;
  void check_api_key(const ApiRequest& request) const;
  void check_model_name(const std::optional<std::string>& requested) const;
  void check_num_sequences(size_t num_prompts, int32_t n) const;
  void check_length(size_t num_prompt_tokens, const std::optional<int32_t>& max_tokens, int64_t max_model_len,
                    const char* where) const;
  ResponseContext response_context(const std::string& id_prefix, const ApiRequest& request,
                                   const GenerationOptions& options, size_t num_prompts) const;

  HttpReply health() const;
  HttpReply metrics(ServingModel* model) const;
  HttpReply models(ServingModel& model) const;
  // GET /v1/models/{id}: the model object if `id` is the served name, else a 404 (as OpenAI answers).
  HttpReply model_card(const std::string& id, const ServingModel& model) const;
  Json model_json(const ServingModel& model) const;
  HttpReply tokenize(const ApiRequest& request, ServingModel& model) const;
  HttpReply detokenize(const ApiRequest& request, ServingModel& model) const;
  PreparedGeneration completions(const ApiRequest& request, ServingModel& model) const;
  PreparedGeneration chat_completions(const ApiRequest& request, ServingModel& model) const;

  ApiConfig config_;
  ServerMetrics& metrics_;
  std::atomic<ServingModel*> model_{nullptr};
  // The engine admits the sequences of one group in turn with other requests' (GenerateRequest::admission_group).
  mutable std::atomic<uint64_t> next_admission_group_{1};
  GenerationHook generation_hook_;
  int64_t created_;  // reported as the model's creation time
};

// 32 random hex digits.
std::string random_hex_id();

}  // namespace tern::server
