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

#include "engine/request.h"
#include "server/generation_options.h"
#include "server/generation_response.h"
#include "server/http_reply.h"
#include "server/metrics.h"
#include "server/serving_model.h"

namespace tern::server {

struct ApiConfig {
  std::string served_model_name;
  std::string model_dir;               // reported as the model's root
  std::optional<std::string> api_key;  // required as "Authorization: Bearer <key>" on all but /health and /metrics
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
  void check_length(size_t num_prompt_tokens, const std::optional<int32_t>& max_tokens, int64_t max_model_len,
                    const char* where) const;
  ResponseContext response_context(const std::string& id_prefix, const ApiRequest& request,
                                   const GenerationOptions& options, size_t num_prompts) const;

  HttpReply health() const;
  HttpReply metrics(ServingModel* model) const;
  HttpReply models(ServingModel& model) const;
  HttpReply tokenize(const ApiRequest& request, ServingModel& model) const;
  HttpReply detokenize(const ApiRequest& request, ServingModel& model) const;
  PreparedGeneration completions(const ApiRequest& request, ServingModel& model) const;
  PreparedGeneration chat_completions(const ApiRequest& request, ServingModel& model) const;

  ApiConfig config_;
  ServerMetrics& metrics_;
  std::atomic<ServingModel*> model_{nullptr};
  GenerationHook generation_hook_;
  int64_t created_;  // reported as the model's creation time
};

// 32 random hex digits.
std::string random_hex_id();

}  // namespace tern::server
