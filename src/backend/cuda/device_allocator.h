#pragma once
// A caching device allocator: freed blocks go to a free list of their size class instead of back to the driver,
// so the many short-lived tensors of a step cost a map lookup, not a cudaMalloc/cudaFree (which synchronize).
// All work runs on one stream, so a block freed by the host can be handed out again at once: any later use is
// ordered after the kernels that used it before.
#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "backend/tensor.h"

namespace tern::kernels {
struct DeferredIds;
}

namespace tern::cuda {

class DeviceAllocator : public std::enable_shared_from_this<DeviceAllocator> {
 public:
  ~DeviceAllocator();
  // A tensor whose storage returns its block to this allocator when the last handle goes.
  Tensor allocate(DType dtype, std::vector<int64_t> shape);
  void* allocate_bytes(size_t bytes);
  void release(void* ptr, size_t size_class, bool recorded_pool);
  // While on, blocks come from and go back to a pool of their own that only recorded graphs (CUDA graphs) use:
  // a graph keeps the addresses it was recorded with, so its blocks must never be handed to an eager step.
  // Graphs share the pool: they replay one at a time on one stream, and none keeps data across replays except its
  // output, which its holder keeps allocated.
  void set_recording(bool on);
  // Size class of a request: 256-byte granules below 1 MiB, then steps of an eighth of a power of two, and 2 MiB
  // pages past 256 MiB.
  static size_t size_class(size_t bytes);
  size_t cached_bytes() const;

 private:
  void release_cached();

  mutable std::mutex mutex_;
  std::map<size_t, std::vector<void*>> free_blocks_;
  std::map<size_t, std::vector<void*>> recorded_free_blocks_;
  bool recording_ = false;
  size_t cached_bytes_ = 0;
};

// Page-locked host memory used as a ring for host-to-device uploads, each copied by a kernel that reads the ring
// (kernels/elementwise/host_copy.h): a slot is reused only after the copy that read it has finished (an event
// recorded after each copy).
class PinnedStaging {
 public:
  explicit PinnedStaging(size_t initial_bytes = 1 << 20);
  ~PinnedStaging();
  PinnedStaging(const PinnedStaging&) = delete;
  PinnedStaging& operator=(const PinnedStaging&) = delete;
  // Copies `bytes` from `src` to device memory `dst` asynchronously on `stream`, resolving `deferred` ids on the way
  // if given (kernels/elementwise/host_copy.h).
  void upload(void* dst, const void* src, size_t bytes, void* stream, const kernels::DeferredIds* deferred = nullptr);

 private:
  char* buffer_ = nullptr;
  size_t capacity_ = 0;
  size_t offset_ = 0;
  void* last_copy_ = nullptr;  // cudaEvent_t
};

}  // namespace tern::cuda
