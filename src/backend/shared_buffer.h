#pragma once
// Memory that two processes of one host both map, so that a prompt's KV moves from a prefill instance's cache to a
// decode instance's without a trip through sockets: device memory shared through CUDA IPC on GPUs (a peer copy
// when the two instances run on different GPUs), POSIX shared memory on the CPU. One process creates it and sends
// its handle (a few bytes) to the other, which opens it.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace tern {

class SharedBuffer {
 public:
  virtual ~SharedBuffer() = default;
  virtual void* data() const = 0;
  virtual size_t size() const = 0;
  // What the other process passes to Backend::open_shared_buffer. It names its kind first ("cuda-ipc",
  // "posix-shm"), so a backend given another kind's handle says so.
  virtual std::vector<uint8_t> handle() const = 0;
};

// A handle is its kind, a zero byte, then the kind's own bytes. decode_shared_handle returns those bytes, or
// throws tern::Error naming both kinds when `handle` is of another kind.
std::vector<uint8_t> encode_shared_handle(std::string_view kind, std::span<const uint8_t> body);
std::span<const uint8_t> decode_shared_handle(std::span<const uint8_t> handle, std::string_view kind);

}  // namespace tern
