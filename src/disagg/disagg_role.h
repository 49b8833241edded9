#pragma once
// `tern serve --role prefill|decode|both`: what an instance adds to the server for prefill/decode disaggregation.
// prefill: answers requests that carry kv_transfer_params by prefilling and sending the prompt's KV (PrefillHandoff).
// decode: accepts KV on its transfer endpoint and keeps it in the prefix cache (KvReceiver).
// both (the default): serves such requests too, and accepts KV when given a transfer port.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "server/openai_api.h"

namespace tern::disagg {

struct DisaggConfig {
  std::string role = "both";
  std::string transport = "tcp";
  std::string kv_host = "127.0.0.1";
  std::optional<uint16_t> kv_port;  // decode: default 0 (any free port, printed on stderr)
  std::optional<int32_t> blocks_per_chunk;  // default: the transport's (make_kv_transport)
  double transfer_timeout_s = 30.0;  // each wait of a KV sender (connect, write, answer)
};

// Throws tern::Error naming a bad role, transport or combination (before the model loads).
void check_disagg_config(const DisaggConfig& config);

// Starts the role on a loaded model; it runs until the returned handle is released (after the server drained).
std::shared_ptr<void> attach_disagg_role(const DisaggConfig& config, server::OpenAiApi& api,
                                         server::ServingModel& model);

}  // namespace tern::disagg
