#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <optional>

#include "chat/output_parser_registry.h"
#include "cli/commands.h"
#include "cli/engine_options.h"
#include "cli/load_progress_display.h"
#include "cli/options.h"
#include "cli/validators.h"
#include "core/error.h"
#include "disagg/disagg_role.h"
#include "grammar/grammar_cache.h"
#include "server/serve.h"

namespace tern::cli {

namespace {

struct OutputParserFlags {
  std::string chat_template_file;
  std::string tool_call_parser;
  std::string reasoning_parser;
  bool enable_auto_tool_choice = false;

  void add_to(CLI::App& cmd) {
    cmd.add_option("--chat-template", chat_template_file, "Jinja file to use instead of the model's chat template");
    cmd.add_option("--tool-call-parser", tool_call_parser,
                   "How tool calls are read from the model's output (as vLLM's): " + chat::tool_call_parser_names() +
                       " (default: the one the chat template's markers call for)");
    cmd.add_option("--reasoning-parser", reasoning_parser,
                   "How reasoning is split from the content (as vLLM's): " + chat::reasoning_parser_names() +
                       " (default: the one the chat template's markers call for)");
    cmd.add_flag("--enable-auto-tool-choice", enable_auto_tool_choice,
                 "Let the model call tools on its own (tool_choice \"auto\"), as vLLM's flag; tern does this whenever "
                 "a tool-call parser is known, and with this flag refuses to start without one");
  }

  // Checks the names and reads the template file into `config`. Fails naming the valid parsers.
  void apply(server::ServingModelConfig& config) const {
    if (!tool_call_parser.empty() && !chat::find_tool_call_parser(tool_call_parser)) {
      fail("--tool-call-parser {}: unknown; the tool-call parsers are {}", tool_call_parser,
           chat::tool_call_parser_names());
    }
    if (!reasoning_parser.empty() && !chat::find_reasoning_parser(reasoning_parser)) {
      fail("--reasoning-parser {}: unknown; the reasoning parsers are {}", reasoning_parser,
           chat::reasoning_parser_names());
    }
    config.tool_call_parser = tool_call_parser;
    config.reasoning_parser = reasoning_parser;
    config.require_tool_call_parser = enable_auto_tool_choice;
    if (!chat_template_file.empty()) {
      std::ifstream in(chat_template_file, std::ios::binary);
      if (!in) fail("--chat-template {}: cannot open the file", chat_template_file);
      config.chat_template_override.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
      if (config.chat_template_override.empty()) fail("--chat-template {}: the file is empty", chat_template_file);
    }
  }
};

// vLLM's --structured-outputs-config, a JSON object; tern reads its enable_in_reasoning (a boolean: constrain the
// reasoning too, the grammar applying from the first token) and refuses other keys, which it does not implement.
bool structured_outputs_enable_in_reasoning(const std::string& text) {
  const auto config = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded() || !config.is_object()) {
    fail("--structured-outputs-config: '{}' is not a JSON object (expected e.g. '{{\"enable_in_reasoning\": true}}')",
         text);
  }
  bool enable_in_reasoning = false;
  for (const auto& [key, value] : config.items()) {
    if (key != "enable_in_reasoning") {
      fail("--structured-outputs-config: unknown key '{}'; the only key tern reads is enable_in_reasoning", key);
    }
    if (!value.is_boolean()) {
      fail("--structured-outputs-config: enable_in_reasoning must be true or false, got {}", value.dump());
    }
    enable_in_reasoning = value.get<bool>();
  }
  return enable_in_reasoning;
}

}  // namespace

void add_serve_command(CLI::App& app) {
  struct Options {
    server::ServeConfig config;
    ModelFlags model;
    EngineFlags engine;
    std::string api_key;
    double header_timeout_s = 30.0;
    double drain_timeout_s = 30.0;
    int64_t max_body_mib = 32;
    int64_t grammar_cache_mib = static_cast<int64_t>(grammar::kDefaultGrammarCacheBytes >> 20);
    bool disable_log_requests = false;
    disagg::DisaggConfig disagg;
    OutputParserFlags output_parsers;
    std::string structured_outputs_config;
  };
  auto options = std::make_shared<Options>();
  auto& config = options->config;
  CLI::App* cmd = app.add_subcommand("serve", "Serve a model over an OpenAI-compatible HTTP API");
  options->model.add_to(*cmd);
  cmd->add_option("--host", config.http.host, "Address to listen on")->capture_default_str();
  cmd->add_option("--port", config.http.port, "Port to listen on (0: any free port, printed on stderr)")
      ->capture_default_str();
  CLI::Option* api_key_option = cmd->add_option(
      "--api-key", options->api_key,
      "Require 'Authorization: Bearer <key>' on every route but /health (default: $TERN_API_KEY; none if unset; "
      "an empty key is refused)");
  cmd->add_flag("--metrics-without-auth", config.metrics_without_auth,
                "Serve /metrics without the --api-key (to a scraper that cannot send it)");
  cmd->add_option("--served-model-name", config.served_model_name, "Model name in the API (default: --model as given)");
  options->engine.add_to(*cmd);
  options->output_parsers.add_to(*cmd);
  cmd->add_option("--http-threads", config.http.num_io_threads, "Threads serving connections")
      ->check(positive())->capture_default_str();
  cmd->add_option("--worker-threads", config.http.num_worker_threads,
                  "Threads parsing, templating and tokenizing requests")->check(positive())->capture_default_str();
  cmd->add_option("--header-timeout", options->header_timeout_s,
                  "Seconds a client has to send a request head (and again its body)")
      ->check(positive())->capture_default_str();
  cmd->add_option("--drain-timeout", options->drain_timeout_s,
                  "Seconds to let in-flight requests finish after SIGTERM before cancelling them")
      ->check(non_negative())->capture_default_str();
  cmd->add_option("--grammar-cache-memory", options->grammar_cache_mib,
                  "MiB of compiled structured-output grammars kept for reuse (least recently used evicted past it)")
      ->capture_default_str()
      ->check(non_negative());
  CLI::Option* structured_outputs_option = cmd->add_option(
      "--structured-outputs-config", options->structured_outputs_config,
      "Structured outputs, as vLLM's JSON object: {\"enable_in_reasoning\": true} applies a chat output's JSON "
      "constraint from the first token, over the model's reasoning too (default: after the reasoning, where a "
      "reasoning parser reads it)");
  cmd->add_option("--max-body-size", options->max_body_mib, "Largest request body in MiB (larger: 413)")
      ->check(positive())->capture_default_str();
  cmd->add_option("--max-sequences-per-request", config.max_sequences_per_request,
                  "Most sequences (prompts x n) one request may ask for; more is refused with 400")
      ->check(positive())->capture_default_str();
  cmd->add_flag("--disable-log-requests", options->disable_log_requests, "No per-request log lines on stderr");
  cmd->add_option("--role", options->disagg.role,
                  "Prefill/decode disaggregation: prefill, decode or both (prefill and send KV when a request "
                  "carries kv_transfer_params; accept KV when --kv-transfer-port is given)")
      ->check(CLI::IsMember({"prefill", "decode", "both"}))->capture_default_str();
  cmd->add_option("--kv-transfer", options->disagg.transport,
                  "KV transfer between prefill and decode instances: tcp (any hosts) or ipc (one host: shared "
                  "memory, GPU to GPU through CUDA IPC on the cuda backend)")
      ->check(CLI::IsMember({"tcp", "ipc"}))->capture_default_str();
  cmd->add_option("--kv-transfer-host", options->disagg.kv_host, "Address the KV transfer endpoint listens on")
      ->capture_default_str();
  cmd->add_option("--kv-transfer-port", options->disagg.kv_port,
                  "Port of the KV transfer endpoint (decode; 0: any free port, printed on stderr)");
  cmd->add_option("--kv-transfer-chunk-blocks", options->disagg.blocks_per_chunk,
                  "KV blocks per transfer message (default: 8 over tcp, 32 through ipc)")
      ->check(positive());
  cmd->add_option("--kv-transfer-timeout", options->disagg.transfer_timeout_s,
                  "Seconds a prefill instance waits to connect to a decode instance, to send a chunk or for its "
                  "answer, before it gives up on the transfer (the decode instance then prefills itself)")
      ->check(positive())->capture_default_str();
  cmd->callback([options, api_key_option, structured_outputs_option] {
    auto& config = options->config;
    config.api_key = api_key_setting(api_key_option->count() > 0, options->api_key, "--api-key", "TERN_API_KEY");
    config.model.model_dir = options->model.model_dir();
    config.model.backend = options->model.backend;
    config.model.num_threads = options->model.threads;
    config.model.quantization = options->model.online_quantization();
    config.model.parallel = options->engine.parallel;
    config.model.engine = options->engine.to_config(config.model.model_dir);
    config.model.on_load_progress = load_progress_display();
    config.model.grammar_cache_bytes = static_cast<size_t>(options->grammar_cache_mib) << 20;
    options->output_parsers.apply(config.model);
    if (structured_outputs_option->count() > 0) {
      config.structured_outputs_in_reasoning =
          structured_outputs_enable_in_reasoning(options->structured_outputs_config);
    }
    if (config.served_model_name.empty()) config.served_model_name = options->model.model;
    config.http.header_timeout = std::chrono::milliseconds(static_cast<int64_t>(options->header_timeout_s * 1e3));
    config.drain_timeout = std::chrono::milliseconds(static_cast<int64_t>(options->drain_timeout_s * 1e3));
    config.http.max_body_bytes = static_cast<uint64_t>(options->max_body_mib) << 20;
    config.http.log_requests = !options->disable_log_requests;
    disagg::check_disagg_config(options->disagg);
    if (config.model.parallel.decode_context_parallel_size > 1 && options->disagg.role != "both") {
      fail("--role {} does not work with --decode-context-parallel-size {}: KV transfer moves whole blocks of one "
           "rank's cache, and each rank holds only its share of the tokens", options->disagg.role,
           config.model.parallel.decode_context_parallel_size);
    }
    if ((config.model.parallel.tensor_parallel_size > 1 || config.model.parallel.data_parallel_size > 1) &&
        options->disagg.role != "both") {
      fail("--role {} needs --tensor-parallel-size 1 and --data-parallel-size 1: KV transfer moves one rank's cache",
           options->disagg.role);
    }
    config.attach = [disagg = options->disagg](server::OpenAiApi& api, server::ServingModel& model) {
      return disagg::attach_disagg_role(disagg, api, model);
    };
    server::serve(config);
  });
}

}  // namespace tern::cli
