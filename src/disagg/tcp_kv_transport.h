#pragma once
// KV transfer over TCP (Boost.Asio): works between any two hosts, and is what CI runs on 127.0.0.1. One connection
// per transfer (kv_channel.h); each chunk is one message whose body is a KV block export (kv_block_transfer.h),
// copied out of the prefill instance's cache into host memory and, on the decode side, into its cache.
#include "disagg/kv_transport.h"

namespace tern::disagg {

class TcpKvTransport final : public KvTransport {
 public:
  TcpKvTransport(std::chrono::milliseconds timeout, int32_t blocks_per_chunk)
      : timeout_(timeout), blocks_per_chunk_(blocks_per_chunk) {}
  std::string_view name() const override { return "tcp"; }
  int32_t blocks_per_chunk() const override { return blocks_per_chunk_; }
  std::unique_ptr<KvSender> connect(const std::string& endpoint, Engine& engine) override;
  std::unique_ptr<KvReceiver> listen(const std::string& host, uint16_t port, Engine& engine) override;

 private:
  std::chrono::milliseconds timeout_;
  int32_t blocks_per_chunk_;
};

}  // namespace tern::disagg
