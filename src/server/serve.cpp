#include "server/serve.h"

#include <cstdio>

namespace tern::server {

void serve(const ServeConfig& config) {
  ServerMetrics metrics;
  ApiConfig api_config;
  api_config.served_model_name = config.served_model_name.empty() ? config.model.model_dir.string()
                                                                  : config.served_model_name;
  api_config.model_dir = config.model.model_dir.string();
  api_config.api_key = config.api_key;
  api_config.metrics_without_auth = config.metrics_without_auth;
  api_config.max_sequences_per_request = config.max_sequences_per_request;
  api_config.structured_outputs_in_reasoning = config.structured_outputs_in_reasoning;
  OpenAiApi api(std::move(api_config), metrics);

  HttpServer server(config.http, api, metrics);
  server.start();
  // Tests and scripts read this line to learn the port (e.g. with --port 0).
  std::fprintf(stderr, "tern: listening on http://%s:%u (loading the model)\n", config.http.host.c_str(),
               static_cast<unsigned>(server.port()));

  // Declared after the server: destroyed first, so no engine callback outlives the connections it posts to.
  std::unique_ptr<ServingModel> model;
  std::shared_ptr<void> attached;  // released before the model it uses
  try {
    model = ServingModel::load(config.model);
    if (config.attach) attached = config.attach(api, *model);
  } catch (...) {
    server.begin_shutdown();
    server.drain(std::chrono::milliseconds(0));
    server.stop();
    throw;
  }
  api.set_model(model.get());
  std::fprintf(stderr, "tern: ready: serving '%s' (max_model_len %lld)\n",
               (config.served_model_name.empty() ? config.model.model_dir.string() : config.served_model_name).c_str(),
               static_cast<long long>(model->max_model_len()));

  server.wait_for_shutdown_request();
  server.drain(config.drain_timeout);
  server.stop();
  api.set_model(nullptr);
  attached.reset();
  model.reset();
  std::fprintf(stderr, "tern: stopped\n");
}

}  // namespace tern::server
