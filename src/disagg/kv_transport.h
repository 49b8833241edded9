#pragma once
// How a prompt's KV travels from a prefill instance to a decode instance (prefill/decode disaggregation). The
// prefill side opens a KvSender to the decode instance's endpoint and sends the prompt's whole blocks a chunk at a
// time, as its engine caches them; the decode side's KvReceiver imports each chunk into its engine's prefix cache
// as it arrives (Engine::import_prompt_kv), so a later request for the prompt reuses it. Nothing else ties the
// two: a chunk that never arrives only means the decode instance computes those tokens itself.
// Transports: "tcp" (tcp_kv_transport.h: any two hosts) and "ipc" (ipc_kv_transport.h: one host, the blocks
// copied through shared memory, GPU to GPU on CUDA).
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace tern {
class Engine;
}

namespace tern::disagg {

// One transfer to one decode instance.
class KvSender {
 public:
  virtual ~KvSender() = default;
  // Sends the blocks [first_block, first_block + max_blocks) of `prompt` that the engine given to connect() has
  // cached (Engine::export_prompt_kv) without waiting for the decode instance to import them, so that export,
  // transfer and import of successive chunks overlap. Returns how many blocks it sent: 0 when the engine holds
  // none from first_block on. Throws tern::Error on failure.
  virtual int32_t send(std::span<const int32_t> prompt, int32_t first_block, int32_t max_blocks) = 0;
  // Waits until the decode instance has imported every chunk sent; returns how many blocks it newly cached.
  // Throws tern::Error with the decode side's message when it refused a chunk.
  virtual int64_t finish() = 0;
};

// Accepts transfers for `engine` until destroyed.
class KvReceiver {
 public:
  virtual ~KvReceiver() = default;
  virtual uint16_t port() const = 0;
  // Blocks imported so far (for logs and tests).
  virtual int64_t num_imported_blocks() const = 0;
};

class KvTransport {
 public:
  virtual ~KvTransport() = default;
  virtual std::string_view name() const = 0;
  // The most blocks one chunk (one message) holds.
  virtual int32_t blocks_per_chunk() const = 0;
  // `endpoint`: the decode instance's transfer address as it gives it ("host:port"); `engine`: the one whose
  // cached blocks are sent.
  virtual std::unique_ptr<KvSender> connect(const std::string& endpoint, Engine& engine) = 0;
  // Listens on host:port (0: any free port); throws tern::Error when it cannot bind.
  virtual std::unique_ptr<KvReceiver> listen(const std::string& host, uint16_t port, Engine& engine) = 0;
};

// "tcp" or "ipc"; throws tern::Error naming the transport otherwise. A sender gives up on a connection, a chunk's
// write or an answer after `timeout`, so a decode instance that hangs costs the prefill instance a bounded wait.
// `blocks_per_chunk`: the most blocks a chunk holds (the ipc transport's shared slots are that large); by default
// what moved 8B-shaped KV fastest on an H200 (docs/BENCHMARKS.md): 8 over tcp, 32 through ipc.
std::unique_ptr<KvTransport> make_kv_transport(std::string_view name,
                                               std::chrono::milliseconds timeout = std::chrono::seconds(30),
                                               std::optional<int32_t> blocks_per_chunk = std::nullopt);

}  // namespace tern::disagg
