#include "disagg/tcp_kv_transport.h"

#include "backend/kv_block_transfer.h"
#include "disagg/kv_channel.h"
#include "engine/engine.h"

namespace tern::disagg {

namespace {

constexpr uint32_t kChunk = 0x4D56'4B54;  // "TKVM" little-endian

class TcpKvSender final : public KvSender {
 public:
  TcpKvSender(const std::string& endpoint, std::chrono::milliseconds timeout, Engine& engine)
      : channel_(endpoint, timeout), engine_(engine) {}

  int32_t send(std::span<const int32_t> prompt, int32_t first_block, int32_t max_blocks) override {
    const auto chunk = engine_.export_prompt_kv({prompt.begin(), prompt.end()}, first_block, max_blocks);
    const int32_t num_blocks = kv_blocks_in_export(chunk);
    if (num_blocks > 0) channel_.write(kChunk, prompt, first_block, chunk);
    return num_blocks;
  }

  int64_t finish() override {
    int64_t imported = 0;
    while (channel_.num_unanswered() > 0) imported += channel_.read_answer();
    return imported;
  }

 private:
  KvChannelSender channel_;
  Engine& engine_;
};

}  // namespace

std::unique_ptr<KvSender> TcpKvTransport::connect(const std::string& endpoint, Engine& engine) {
  return std::make_unique<TcpKvSender>(endpoint, timeout_, engine);
}

std::unique_ptr<KvReceiver> TcpKvTransport::listen(const std::string& host, uint16_t port, Engine& engine) {
  return std::make_unique<KvChannelListener>(host, port, std::vector<uint32_t>{kChunk}, [&engine] {
    return [&engine](KvChannelMessage& message) {
      return engine.import_prompt_kv(std::move(message.prompt), message.first_block, std::move(message.body));
    };
  });
}

}  // namespace tern::disagg
