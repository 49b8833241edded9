#include "disagg/disagg_role.h"

#include <cstdio>

#include "core/error.h"
#include "disagg/prefill_handoff.h"

namespace tern::disagg {

namespace {

struct AttachedRole {
  std::unique_ptr<KvTransport> transport;
  std::unique_ptr<PrefillHandoff> handoff;
  std::unique_ptr<KvReceiver> receiver;
};

std::chrono::milliseconds transfer_timeout(const DisaggConfig& config) {
  return std::chrono::milliseconds(static_cast<int64_t>(config.transfer_timeout_s * 1e3));
}

}  // namespace

void check_disagg_config(const DisaggConfig& config) {
  if (config.role != "prefill" && config.role != "decode" && config.role != "both") {
    fail("--role '{}': expected prefill, decode or both", config.role);
  }
  if (config.role == "prefill" && config.kv_port) fail("--kv-transfer-port: a prefill instance receives no KV");
  make_kv_transport(config.transport, transfer_timeout(config), config.blocks_per_chunk);
}

std::shared_ptr<void> attach_disagg_role(const DisaggConfig& config, server::OpenAiApi& api,
                                         server::ServingModel& model) {
  check_disagg_config(config);
  auto role = std::make_shared<AttachedRole>();
  role->transport = make_kv_transport(config.transport, transfer_timeout(config), config.blocks_per_chunk);
  if (config.role != "decode") {
    role->handoff = std::make_unique<PrefillHandoff>(*role->transport);
    api.set_generation_hook([handoff = role->handoff.get()](const server::ApiRequest& request,
                                                            server::PreparedGeneration& generation) {
      return handoff->handle(request, generation);
    });
  }
  if (config.role == "decode" || config.kv_port) {
    role->receiver = role->transport->listen(config.kv_host, config.kv_port.value_or(0), model.engine());
    // Gateways and tests read this line to learn the transfer endpoint (e.g. with --kv-transfer-port 0).
    std::fprintf(stderr, "tern: accepting KV transfers (%s) on %s:%u\n", std::string(role->transport->name()).c_str(),
                 config.kv_host.c_str(), static_cast<unsigned>(role->receiver->port()));
  }
  return role;
}

}  // namespace tern::disagg
