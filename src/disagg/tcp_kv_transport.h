#pragma once
// KV transfer over TCP (Boost.Asio): works between any two hosts, and is what CI runs on 127.0.0.1. One connection
// per transfer; each chunk is one message, answered by the number of blocks the decode side imported (or its
// error). The sender writes every chunk before reading any answer, so the receiver imports early chunks while
// later ones are still being exported and sent.
//
// Message: u32 magic "TKVM", u32 prompt length, prompt ids (i32 each), i32 first block, u64 payload length,
// payload (a KV block export). Answer: i32 blocks imported, or -1 then u32 length and an error message.
// The sender bounds every wait (connect, each write, each answer) by the transport's timeout.
// Integers are little-endian (both ends are: x86-64 and aarch64).
#include "disagg/kv_transport.h"

namespace tern::disagg {

class TcpKvTransport final : public KvTransport {
 public:
  explicit TcpKvTransport(std::chrono::milliseconds timeout) : timeout_(timeout) {}
  std::string_view name() const override { return "tcp"; }
  std::unique_ptr<KvSender> connect(const std::string& endpoint) override;
  std::unique_ptr<KvReceiver> listen(const std::string& host, uint16_t port, Engine& engine) override;

 private:
  std::chrono::milliseconds timeout_;
};

}  // namespace tern::disagg
