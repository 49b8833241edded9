#include "backend/cuda/device_allocator.h"

#include <algorithm>
#include <cstring>

#include "backend/cuda/cuda_check.h"
#include "core/tensor_info.h"
#include "elementwise/host_copy.h"

namespace tern::cuda {

DeviceAllocator::~DeviceAllocator() {
  release_cached();
  // Recorded graphs keep the addresses of the recorded pool's free blocks: they go only with the allocator.
  for (auto& [size, blocks] : recorded_free_blocks_) {
    for (void* ptr : blocks) cudaFree(ptr);
  }
}

size_t DeviceAllocator::size_class(size_t bytes) {
  constexpr size_t kGranule = 256;
  constexpr size_t kSmall = size_t{1} << 20;
  // Past this, blocks are long-lived (weights, the KV pool): 2 MiB pages, not eighths of a power of two, which
  // would waste up to 12% of a 100 GB KV pool.
  constexpr size_t kLarge = size_t{256} << 20;
  constexpr size_t kPage = size_t{2} << 20;
  bytes = std::max<size_t>(bytes, 1);
  if (bytes <= kSmall) return (bytes + kGranule - 1) / kGranule * kGranule;
  if (bytes > kLarge) return (bytes + kPage - 1) / kPage * kPage;
  size_t power = kSmall;
  while (power * 2 < bytes) power *= 2;
  const size_t step = power / 8;
  return (bytes + step - 1) / step * step;
}

void* DeviceAllocator::allocate_bytes(size_t bytes) {
  const size_t size = size_class(bytes);
  {
    std::lock_guard lock(mutex_);
    auto& pool = recording_ ? recorded_free_blocks_ : free_blocks_;
    auto it = pool.find(size);
    if (it != pool.end() && !it->second.empty()) {
      void* ptr = it->second.back();
      it->second.pop_back();
      if (!recording_) cached_bytes_ -= size;
      return ptr;
    }
  }
  void* ptr = nullptr;
  if (cudaMalloc(&ptr, size) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free out-of-memory status before retrying
    release_cached();
    check(cudaMalloc(&ptr, size), "cudaMalloc (out of device memory?)");
  }
  return ptr;
}

void DeviceAllocator::release(void* ptr, size_t size_class, bool recorded_pool) {
  std::lock_guard lock(mutex_);
  if (recorded_pool) {
    recorded_free_blocks_[size_class].push_back(ptr);
    return;
  }
  free_blocks_[size_class].push_back(ptr);
  cached_bytes_ += size_class;
}

void DeviceAllocator::set_recording(bool on) {
  std::lock_guard lock(mutex_);
  recording_ = on;
}

void DeviceAllocator::release_cached() {
  std::lock_guard lock(mutex_);
  // Blocks may still be in use by queued kernels; cudaFree waits for the device, which keeps this safe.
  for (auto& [size, blocks] : free_blocks_) {
    for (void* ptr : blocks) cudaFree(ptr);
  }
  free_blocks_.clear();
  cached_bytes_ = 0;
}

size_t DeviceAllocator::cached_bytes() const {
  std::lock_guard lock(mutex_);
  return cached_bytes_;
}

Tensor DeviceAllocator::allocate(DType dtype, std::vector<int64_t> shape) {
  Tensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  for (int64_t d : t.shape) {
    if (d < 0) fail("cuda backend: negative dimension in a tensor of shape {}", shape_string(t.shape));
  }
  const size_t bytes = t.bytes();
  void* ptr = allocate_bytes(bytes);
  const size_t size = size_class(bytes);
  bool recorded_pool = false;
  {
    std::lock_guard lock(mutex_);
    recorded_pool = recording_;
  }
  std::weak_ptr<DeviceAllocator> owner = weak_from_this();
  t.storage = std::shared_ptr<void>(ptr, [owner, size, recorded_pool](void* p) {
    if (auto allocator = owner.lock()) {
      allocator->release(p, size, recorded_pool);
    } else {
      cudaFree(p);
    }
  });
  t.data = ptr;
  return t;
}

PinnedStaging::PinnedStaging(size_t initial_bytes) : capacity_(initial_bytes) {
  check(cudaMallocHost(reinterpret_cast<void**>(&buffer_), capacity_), "cudaMallocHost");
  cudaEvent_t event;
  check(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "cudaEventCreate");
  last_copy_ = event;
}

PinnedStaging::~PinnedStaging() {
  cudaEventSynchronize(static_cast<cudaEvent_t>(last_copy_));
  cudaEventDestroy(static_cast<cudaEvent_t>(last_copy_));
  cudaFreeHost(buffer_);
}

void PinnedStaging::upload(void* dst, const void* src, size_t bytes, void* stream,
                           const kernels::DeferredIds* deferred) {
  if (bytes == 0) return;
  const size_t aligned = (bytes + 255) / 256 * 256;
  auto event = static_cast<cudaEvent_t>(last_copy_);
  if (offset_ + aligned > capacity_) {
    // Every earlier copy ran on the same stream, so once the last one is done the whole ring is free.
    check(cudaEventSynchronize(event), "waiting for a staged upload");
    offset_ = 0;
    if (aligned > capacity_) {
      check(cudaFreeHost(buffer_), "cudaFreeHost");
      capacity_ = std::max(aligned, capacity_ * 2);
      check(cudaMallocHost(reinterpret_cast<void**>(&buffer_), capacity_), "cudaMallocHost");
    }
  }
  std::memcpy(buffer_ + offset_, src, bytes);
  auto s = static_cast<cudaStream_t>(stream);
  kernels::launch_host_copy(dst, buffer_ + offset_, bytes, /*source_ready=*/true, s,
                            deferred ? *deferred : kernels::DeferredIds{});
  check(cudaEventRecord(event, s), "cudaEventRecord");
  offset_ += aligned;
}

}  // namespace tern::cuda
