#include "disagg/kv_transport.h"

#include "core/error.h"
#include "disagg/ipc_kv_transport.h"
#include "disagg/tcp_kv_transport.h"

namespace tern::disagg {

std::unique_ptr<KvTransport> make_kv_transport(std::string_view name, std::chrono::milliseconds timeout,
                                               std::optional<int32_t> blocks_per_chunk) {
  if (timeout.count() <= 0) fail("--kv-transfer-timeout: {} ms must be positive", timeout.count());
  if (blocks_per_chunk && *blocks_per_chunk < 1) {
    fail("--kv-transfer-chunk-blocks: {} blocks per chunk; must be >= 1", *blocks_per_chunk);
  }
  if (name == "tcp") return std::make_unique<TcpKvTransport>(timeout, blocks_per_chunk.value_or(8));
  if (name == "ipc") return std::make_unique<IpcKvTransport>(timeout, blocks_per_chunk.value_or(32));
  fail("--kv-transfer '{}': unknown KV transport (expected tcp or ipc)", name);
}

}  // namespace tern::disagg
