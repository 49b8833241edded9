#include <cstdlib>
#include <optional>

#include "cli/commands.h"
#include "cli/engine_options.h"
#include "core/error.h"
#include "disagg/disagg_role.h"
#include "server/serve.h"

namespace tern::cli {

namespace {

// "512MiB", "2GiB", "1.5GB" or a plain number of bytes.
int64_t parse_memory_size(const std::string& text) {
  size_t end = 0;
  double value = 0.0;
  try {
    value = std::stod(text, &end);
  } catch (const std::exception&) {
    fail("--kv-cache-memory '{}': expected a size such as 512MiB, 4GiB or a number of bytes", text);
  }
  const std::string unit = text.substr(end);
  double scale = 0.0;
  if (unit.empty() || unit == "B") scale = 1.0;
  else if (unit == "KiB") scale = 1024.0;
  else if (unit == "MiB") scale = 1024.0 * 1024.0;
  else if (unit == "GiB") scale = 1024.0 * 1024.0 * 1024.0;
  else if (unit == "KB") scale = 1e3;
  else if (unit == "MB") scale = 1e6;
  else if (unit == "GB") scale = 1e9;
  if (scale == 0.0 || !(value > 0.0)) {
    fail("--kv-cache-memory '{}': expected a size such as 512MiB, 4GiB or a number of bytes", text);
  }
  return static_cast<int64_t>(value * scale);
}

}  // namespace

void add_serve_command(CLI::App& app) {
  struct Options {
    server::ServeConfig config;
    std::string api_key;
    std::string kv_cache_memory;
    double header_timeout_s = 30.0;
    double drain_timeout_s = 30.0;
    int64_t max_body_mib = 32;
    bool disable_log_requests = false;
    std::string overlap_schedule = "on";
    disagg::DisaggConfig disagg;
    std::optional<int64_t> eplb_interval_steps;
  };
  auto options = std::make_shared<Options>();
  auto& config = options->config;
  CLI::App* cmd = app.add_subcommand("serve", "Serve a model over an OpenAI-compatible HTTP API");
  cmd->add_option("--model", config.model.model_dir, "Hugging Face model directory (weights, tokenizer, template)")
      ->required();
  cmd->add_option("--host", config.http.host, "Address to listen on")->capture_default_str();
  cmd->add_option("--port", config.http.port, "Port to listen on (0: any free port, printed on stderr)")
      ->capture_default_str();
  cmd->add_option("--api-key", options->api_key,
                  "Require 'Authorization: Bearer <key>' (default: $TERN_API_KEY; none if unset)");
  cmd->add_option("--served-model-name", config.served_model_name, "Model name in the API (default: the --model path)");
  cmd->add_option("--backend", config.model.backend, "cpu or cuda")->capture_default_str();
  cmd->add_option("--threads", config.model.num_threads, "CPU backend threads (0: all cores)")
      ->check(CLI::NonNegativeNumber);
  add_parallel_options(*cmd, config.model.parallel);
  add_eplb_interval_option(*cmd, options->eplb_interval_steps);
  cmd->add_option("--max-num-seqs", config.model.engine.max_num_seqs, "Sequences running at once")
      ->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--max-num-batched-tokens", config.model.engine.max_num_batched_tokens, "Tokens per engine step")
      ->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--max-model-len", config.model.engine.max_model_len,
                  "Tokens per sequence, prompt included (0: the model's context)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--kv-cache-memory", options->kv_cache_memory,
                  "KV cache size, e.g. 512MiB (default: 90% of the memory available)");
  cmd->add_option("--num-kv-blocks", config.model.engine.num_kv_blocks, "KV cache size in blocks (overrides memory)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--http-threads", config.http.num_io_threads, "Threads serving connections")
      ->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--worker-threads", config.http.num_worker_threads,
                  "Threads parsing, templating and tokenizing requests")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--header-timeout", options->header_timeout_s,
                  "Seconds a client has to send a request head (and again its body)")
      ->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--drain-timeout", options->drain_timeout_s,
                  "Seconds to let in-flight requests finish after SIGTERM before cancelling them")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  cmd->add_option("--max-body-size", options->max_body_mib, "Largest request body in MiB (larger: 413)")
      ->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_flag("--disable-log-requests", options->disable_log_requests, "No per-request log lines on stderr");
  cmd->add_option("--overlap-schedule", options->overlap_schedule,
                  "on: schedule and launch each step before reading the previous step's tokens (the host's work "
                  "hides behind the device's); off: one step at a time")
      ->check(CLI::IsMember({"on", "off"}))->capture_default_str();
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
      ->check(CLI::PositiveNumber);
  cmd->add_option("--kv-transfer-timeout", options->disagg.transfer_timeout_s,
                  "Seconds a prefill instance waits to connect to a decode instance, to send a chunk or for its "
                  "answer, before it gives up on the transfer (the decode instance then prefills itself)")
      ->check(CLI::PositiveNumber)->capture_default_str();
  cmd->callback([options] {
    auto& config = options->config;
    if (!options->api_key.empty()) {
      config.api_key = options->api_key;
    } else if (const char* env = std::getenv("TERN_API_KEY"); env && *env) {
      config.api_key = std::string(env);
    }
    config.model.engine.eplb_interval_steps =
        eplb_interval_or_default(options->eplb_interval_steps, config.model.parallel.num_redundant_experts);
    if (!options->kv_cache_memory.empty()) {
      config.model.engine.kv_cache_memory_bytes = parse_memory_size(options->kv_cache_memory);
    }
    config.http.header_timeout = std::chrono::milliseconds(static_cast<int64_t>(options->header_timeout_s * 1e3));
    config.drain_timeout = std::chrono::milliseconds(static_cast<int64_t>(options->drain_timeout_s * 1e3));
    config.http.max_body_bytes = static_cast<uint64_t>(options->max_body_mib) << 20;
    config.http.log_requests = !options->disable_log_requests;
    config.model.engine.overlap_schedule = options->overlap_schedule == "on";
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
