#include "disagg/ipc_kv_transport.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <map>
#include <string>

#include "backend/kv_block_transfer.h"
#include "core/error.h"
#include "disagg/kv_channel.h"
#include "engine/engine.h"

namespace tern::disagg {

namespace {

constexpr uint32_t kOpenBuffer = 0x424B'564B;  // "KVKB" little-endian
constexpr uint32_t kChunk = 0x534B'564B;       // "KVKS"

class IpcKvSender final : public KvSender {
 public:
  IpcKvSender(IpcKvTransport& transport, std::shared_ptr<StagingSlots> slots, const std::string& endpoint,
              std::chrono::milliseconds timeout, Engine& engine)
      : transport_(transport), slots_(std::move(slots)), channel_(endpoint, timeout), timeout_(timeout),
        engine_(engine) {
    channel_.write(kOpenBuffer, {}, 0, slots_->buffer().handle());
    channel_.read_answer();
  }

  ~IpcKvSender() override {
    if (!in_flight_.empty()) transport_.retire(slots_);
  }

  int32_t send(std::span<const int32_t> prompt, int32_t first_block, int32_t max_blocks) override {
    const int slot = take_slot();
    std::vector<uint8_t> header;
    try {
      const auto slot_blocks = static_cast<int32_t>(slots_->slot_bytes() / engine_.kv_payload_bytes(1));
      header = engine_.export_prompt_kv_to(prompt, first_block, std::min(max_blocks, slot_blocks), slots_->slot(slot));
    } catch (...) {
      slots_->release(slot);
      throw;
    }
    const int32_t num_blocks = kv_blocks_in_export(header);
    if (num_blocks == 0) {
      slots_->release(slot);
      return 0;
    }
    std::vector<uint8_t> body(sizeof(uint64_t));
    const uint64_t offset = static_cast<uint64_t>(slots_->slot(slot) - slots_->slot(0));
    std::memcpy(body.data(), &offset, sizeof(offset));
    body.insert(body.end(), header.begin(), header.end());
    in_flight_.push_back(slot);  // from here on the decode side may read it
    channel_.write(kChunk, prompt, first_block, body);
    return num_blocks;
  }

  int64_t finish() override {
    while (!in_flight_.empty()) answer_oldest();
    return imported_;
  }

 private:
  // A free slot: one of this transfer's own once answered, else any other transfer gives back.
  int take_slot() {
    if (const int slot = slots_->try_acquire(); slot >= 0) return slot;
    if (!in_flight_.empty()) {
      answer_oldest();
      if (const int slot = slots_->try_acquire(); slot >= 0) return slot;
    }
    const int slot = slots_->acquire(timeout_);
    if (slot < 0) fail("KV transfer to {}: no free staging slot within {} ms", channel_.endpoint(), timeout_.count());
    return slot;
  }

  // A refusal settles its slot; any other failure leaves the unanswered slots in flight, and the destructor then
  // retires the buffer.
  void answer_oldest() {
    try {
      imported_ += channel_.read_answer();
    } catch (const KvMessageRefused&) {
      release_oldest();
      throw;
    }
    release_oldest();
  }

  void release_oldest() {
    slots_->release(in_flight_.front());
    in_flight_.pop_front();
  }

  IpcKvTransport& transport_;
  std::shared_ptr<StagingSlots> slots_;
  KvChannelSender channel_;
  std::chrono::milliseconds timeout_;
  Engine& engine_;
  std::deque<int> in_flight_;  // slots of the chunks not answered yet, oldest first
  int64_t imported_ = 0;
};

// The buffers of the prefill instances that sent to this one, opened once each.
class OpenedBuffers {
 public:
  explicit OpenedBuffers(Engine& engine) : engine_(engine) {}
  std::shared_ptr<SharedBuffer> open(const std::vector<uint8_t>& handle) {
    std::lock_guard lock(mutex_);
    auto& opened = buffers_[std::string(handle.begin(), handle.end())];
    if (!opened) opened = engine_.open_shared_buffer(handle);
    return opened;
  }

 private:
  Engine& engine_;
  std::mutex mutex_;
  std::map<std::string, std::shared_ptr<SharedBuffer>> buffers_;  // by handle
};

}  // namespace

StagingSlots::StagingSlots(std::unique_ptr<SharedBuffer> buffer, int num_slots)
    : buffer_(std::move(buffer)), slot_bytes_(buffer_->size() / static_cast<size_t>(num_slots)) {
  for (int i = num_slots - 1; i >= 0; --i) free_.push_back(i);
}

int StagingSlots::try_acquire() {
  std::lock_guard lock(mutex_);
  if (free_.empty()) return -1;
  const int slot = free_.back();
  free_.pop_back();
  return slot;
}

int StagingSlots::acquire(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  if (!freed_.wait_for(lock, timeout, [&] { return !free_.empty(); })) return -1;
  const int slot = free_.back();
  free_.pop_back();
  return slot;
}

void StagingSlots::release(int index) {
  {
    std::lock_guard lock(mutex_);
    free_.push_back(index);
  }
  freed_.notify_one();
}

std::shared_ptr<StagingSlots> IpcKvTransport::staging(Engine& engine) {
  std::lock_guard lock(mutex_);
  if (!staging_) {
    staging_ = std::make_shared<StagingSlots>(
        engine.create_shared_buffer(engine.kv_payload_bytes(blocks_per_chunk_) * kNumSlots), kNumSlots);
  }
  return staging_;
}

void IpcKvTransport::retire(const std::shared_ptr<StagingSlots>& slots) {
  std::lock_guard lock(mutex_);
  if (staging_ == slots) staging_.reset();
  retired_.push_back(slots);
}

std::unique_ptr<KvSender> IpcKvTransport::connect(const std::string& endpoint, Engine& engine) {
  return std::make_unique<IpcKvSender>(*this, staging(engine), endpoint, timeout_, engine);
}

std::unique_ptr<KvReceiver> IpcKvTransport::listen(const std::string& host, uint16_t port, Engine& engine) {
  auto opened = std::make_shared<OpenedBuffers>(engine);
  return std::make_unique<KvChannelListener>(host, port, std::vector<uint32_t>{kOpenBuffer, kChunk}, [&engine, opened] {
    // The connection's buffer, once its first message opened it.
    return [&engine, opened, buffer = std::shared_ptr<SharedBuffer>()](KvChannelMessage& message) mutable -> int32_t {
      if (message.kind == kOpenBuffer) {
        buffer = opened->open(message.body);
        return 0;
      }
      if (!buffer) fail("KV transfer: a chunk before its shared buffer was named");
      if (message.body.size() < sizeof(uint64_t)) fail("KV transfer: a chunk message of {} bytes", message.body.size());
      uint64_t offset = 0;
      std::memcpy(&offset, message.body.data(), sizeof(offset));
      const std::span<const uint8_t> header = std::span<const uint8_t>(message.body).subspan(sizeof(offset));
      const size_t payload = engine.kv_payload_bytes(kv_blocks_in_export(header));
      if (offset > buffer->size() || payload > buffer->size() - offset) {
        fail("KV transfer: a chunk of {} bytes at offset {} of a shared buffer of {}", payload, offset, buffer->size());
      }
      return engine.import_prompt_kv_from(message.prompt, message.first_block, header,
                                          static_cast<const uint8_t*>(buffer->data()) + offset);
    };
  });
}

}  // namespace tern::disagg
