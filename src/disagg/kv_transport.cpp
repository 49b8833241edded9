#include "disagg/kv_transport.h"

#include "core/error.h"
#include "disagg/tcp_kv_transport.h"

namespace tern::disagg {

std::unique_ptr<KvTransport> make_kv_transport(std::string_view name, std::chrono::milliseconds timeout) {
  if (timeout.count() <= 0) fail("--kv-transfer-timeout: {} ms must be positive", timeout.count());
  if (name == "tcp") return std::make_unique<TcpKvTransport>(timeout);
  fail("--kv-transfer '{}': unknown KV transport (this build has: tcp)", name);
}

}  // namespace tern::disagg
