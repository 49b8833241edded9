#include "backend/cuda/pinned_ids.h"

#include <algorithm>

#include "backend/cuda/cuda_check.h"
#include "core/error.h"
#include "elementwise/host_copy.h"

namespace tern::cuda {

namespace {

class PinnedPendingIds final : public PendingIds {
 public:
  PinnedPendingIds(std::shared_ptr<PinnedIdsPool> pool, PinnedIdsPool::Slot slot, size_t count)
      : pool_(std::move(pool)), slot_(slot), count_(count) {}
  ~PinnedPendingIds() override {
    // The slot is reused only once the copy into it is done.
    cudaEventSynchronize(slot_.done);
    pool_->release(slot_);
  }

  std::vector<int32_t> wait() override {
    check(cudaEventSynchronize(slot_.done), "wait for sampled ids");
    return std::vector<int32_t>(slot_.host, slot_.host + count_);
  }

 private:
  std::shared_ptr<PinnedIdsPool> pool_;
  PinnedIdsPool::Slot slot_;
  size_t count_ = 0;
};

}  // namespace

PinnedIdsPool::~PinnedIdsPool() {
  for (const Slot& slot : free_) {
    cudaFreeHost(slot.host);
    cudaEventDestroy(slot.done);
  }
}

PinnedIdsPool::Slot PinnedIdsPool::acquire(size_t count) {
  {
    const std::lock_guard lock(mutex_);
    const auto fits = std::find_if(free_.begin(), free_.end(), [&](const Slot& s) { return s.capacity >= count; });
    if (fits != free_.end()) {
      const Slot slot = *fits;
      free_.erase(fits);
      return slot;
    }
  }
  Slot slot;
  // Room for the largest decode batches at once, so the pool rarely grows.
  slot.capacity = std::max<size_t>(count, 1024);
  check(cudaMallocHost(reinterpret_cast<void**>(&slot.host), slot.capacity * sizeof(int32_t)),
        "pinned buffer for sampled ids");
  const cudaError_t made = cudaEventCreateWithFlags(&slot.done, cudaEventDisableTiming);
  if (made != cudaSuccess) {
    cudaFreeHost(slot.host);
    check(made, "event for sampled ids");
  }
  return slot;
}

void PinnedIdsPool::release(Slot slot) {
  const std::lock_guard lock(mutex_);
  free_.push_back(slot);
}

std::unique_ptr<PendingIds> PinnedIdsPool::copy(const Tensor& ids, cudaStream_t stream) {
  if (ids.dtype != DType::I32) fail("to_host_i32_async: tensor is {}", dtype_name(ids.dtype));
  const auto count = static_cast<size_t>(ids.numel());
  const Slot slot = acquire(count);
  try {
    kernels::launch_host_copy(slot.host, ids.data, count * sizeof(int32_t), /*source_ready=*/false, stream);
  } catch (...) {
    release(slot);
    throw;
  }
  const cudaError_t recorded = cudaEventRecord(slot.done, stream);
  if (recorded != cudaSuccess) {
    release(slot);
    check(recorded, "copy sampled ids to the host");
  }
  return std::make_unique<PinnedPendingIds>(shared_from_this(), slot, count);
}

}  // namespace tern::cuda
