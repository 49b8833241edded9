#pragma once
// Same-host KV transfer through shared memory: the prefill instance exports each chunk of blocks from its cache
// into a slot of a staging buffer that the decode instance maps too (CUDA IPC device memory on GPUs, so the copy
// stays on the GPUs: device to device, or peer to peer when the instances use different GPUs; POSIX shared memory
// on the CPU backend), and the decode instance copies it from there into its own cache. Only a slot's offset and
// the export's header travel over the TCP control connection (kv_channel.h).
//
// The staging buffer belongs to the transport (made at the first transfer, opened once per decode process): its
// slots go to the transfers in flight and come back as the decode side answers. A transfer that fails with slots
// unanswered retires the whole buffer, never reusing it (a hung decode instance might still read those slots),
// and the next transfer makes a new one.
//
// Messages: "TKVB" once per connection, body = the buffer's handle (answered 0 once opened); "TKVS" per chunk,
// body = u64 byte offset of the slot, then the export's header (kv_block_transfer.h).
#include <condition_variable>
#include <memory>
#include <mutex>
#include <vector>

#include "backend/shared_buffer.h"
#include "disagg/kv_transport.h"

namespace tern::disagg {

// Equal slots of one shared buffer, handed out and given back across threads.
class StagingSlots {
 public:
  StagingSlots(std::unique_ptr<SharedBuffer> buffer, int num_slots);
  const SharedBuffer& buffer() const { return *buffer_; }
  size_t slot_bytes() const { return slot_bytes_; }
  uint8_t* slot(int index) const { return static_cast<uint8_t*>(buffer_->data()) + slot_bytes_ * index; }
  // A free slot, or -1.
  int try_acquire();
  // Waits up to `timeout` for a free slot; -1 when none came.
  int acquire(std::chrono::milliseconds timeout);
  void release(int index);

 private:
  std::unique_ptr<SharedBuffer> buffer_;
  size_t slot_bytes_;
  std::mutex mutex_;
  std::condition_variable freed_;
  std::vector<int> free_;
};

class IpcKvTransport final : public KvTransport {
 public:
  static constexpr int kNumSlots = 4;

  IpcKvTransport(std::chrono::milliseconds timeout, int32_t blocks_per_chunk)
      : timeout_(timeout), blocks_per_chunk_(blocks_per_chunk) {}
  std::string_view name() const override { return "ipc"; }
  int32_t blocks_per_chunk() const override { return blocks_per_chunk_; }
  std::unique_ptr<KvSender> connect(const std::string& endpoint, Engine& engine) override;
  std::unique_ptr<KvReceiver> listen(const std::string& host, uint16_t port, Engine& engine) override;

  // For a sender that failed with slots unanswered.
  void retire(const std::shared_ptr<StagingSlots>& slots);

 private:
  std::shared_ptr<StagingSlots> staging(Engine& engine);

  std::chrono::milliseconds timeout_;
  int32_t blocks_per_chunk_;
  std::mutex mutex_;
  std::shared_ptr<StagingSlots> staging_;
  std::vector<std::shared_ptr<StagingSlots>> retired_;  // kept mapped: a decode instance may still read them
};

}  // namespace tern::disagg
