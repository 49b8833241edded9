#pragma once
// Sampled ids copied to page-locked host memory behind the stream's work (Backend::to_host_i32_async), by a kernel
// that writes it (kernels/elementwise/host_copy.h): the host goes on launching the next step and waits for the
// copy's event only when it needs the ids. Buffers and events are pooled, since a step makes one copy and
// cudaMallocHost costs far more than a step's host work.
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "backend/backend.h"

namespace tern::cuda {

class PinnedIdsPool : public std::enable_shared_from_this<PinnedIdsPool> {
 public:
  struct Slot {
    int32_t* host = nullptr;
    size_t capacity = 0;  // int32 values
    cudaEvent_t done = nullptr;
  };

  PinnedIdsPool() = default;
  PinnedIdsPool(const PinnedIdsPool&) = delete;
  PinnedIdsPool& operator=(const PinnedIdsPool&) = delete;
  ~PinnedIdsPool();

  // Starts copying `ids` (int32 in device memory) to the host on `stream`, after the work queued there so far.
  std::unique_ptr<PendingIds> copy(const Tensor& ids, cudaStream_t stream);
  // A slot whose copy has finished goes back to the pool.
  void release(Slot slot);

 private:
  Slot acquire(size_t count);

  std::mutex mutex_;  // slots come back from whichever thread drops the pending ids
  std::vector<Slot> free_;
};

}  // namespace tern::cuda
