#pragma once
// `tern serve`: binds the port, loads the model while /health answers 503, serves the OpenAI-compatible API until
// SIGINT or SIGTERM, then drains in-flight requests and returns.
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "server/http_server.h"
#include "server/openai_api.h"
#include "server/serving_model.h"

namespace tern::server {

struct ServeConfig {
  ServingModelConfig model;
  HttpServerConfig http;
  std::string served_model_name;  // empty: the --model path as given (vLLM's default)
  std::optional<std::string> api_key;
  bool metrics_without_auth = false;  // /metrics answers without the api_key
  int64_t max_sequences_per_request = kDefaultMaxSequencesPerRequest;  // prompts x n of one request
  bool structured_outputs_in_reasoning = false;  // --structured-outputs-config's enable_in_reasoning (ApiConfig)
  std::chrono::milliseconds drain_timeout{30'000};  // in-flight requests still running after this are cancelled
  // Started once the model is loaded, before requests reach it; the handle it returns is released after the server
  // drained (prefill/decode disaggregation's roles, src/disagg).
  std::function<std::shared_ptr<void>(OpenAiApi&, ServingModel&)> attach;
};

// Returns when the server has drained after a signal. Throws tern::Error if the port cannot be bound or the
// model cannot be loaded.
void serve(const ServeConfig& config);

}  // namespace tern::server
