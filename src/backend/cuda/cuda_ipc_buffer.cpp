#include "backend/cuda/cuda_ipc_buffer.h"

#include <cstring>

#include "backend/cuda/cuda_check.h"

namespace tern::cuda {

namespace {

constexpr std::string_view kKind = "cuda-ipc";

class CudaIpcBuffer final : public SharedBuffer {
 public:
  // Allocates `size` bytes on the current device (owner) or opens another process's allocation.
  CudaIpcBuffer(size_t size, const cudaIpcMemHandle_t* opened) : size_(size), owner_(opened == nullptr) {
    check(cudaGetDevice(&device_), "cudaGetDevice");
    if (owner_) {
      check(cudaMalloc(&data_, size_), "shared KV buffer: cudaMalloc");
      if (const cudaError_t status = cudaIpcGetMemHandle(&handle_, data_); status != cudaSuccess) {
        cudaFree(data_);
        check(status, "shared KV buffer: cudaIpcGetMemHandle");
      }
    } else {
      handle_ = *opened;
      check(cudaIpcOpenMemHandle(&data_, handle_, cudaIpcMemLazyEnablePeerAccess),
            "shared KV buffer: cudaIpcOpenMemHandle (both instances must run on GPUs of one host, in separate "
            "processes)");
    }
  }

  ~CudaIpcBuffer() override {
    // Possibly on another thread than the one that made it.
    cudaSetDevice(device_);
    if (owner_) {
      cudaFree(data_);
    } else {
      cudaIpcCloseMemHandle(data_);
    }
  }

  void* data() const override { return data_; }
  size_t size() const override { return size_; }

  std::vector<uint8_t> handle() const override {
    std::vector<uint8_t> body(sizeof(uint64_t) + sizeof(handle_));
    const auto size = static_cast<uint64_t>(size_);
    std::memcpy(body.data(), &size, sizeof(size));
    std::memcpy(body.data() + sizeof(size), &handle_, sizeof(handle_));
    return encode_shared_handle(kKind, body);
  }

 private:
  size_t size_;
  bool owner_;
  int device_ = 0;
  void* data_ = nullptr;
  cudaIpcMemHandle_t handle_{};
};

}  // namespace

std::unique_ptr<SharedBuffer> create_ipc_buffer(size_t bytes) { return std::make_unique<CudaIpcBuffer>(bytes, nullptr); }

std::unique_ptr<SharedBuffer> open_ipc_buffer(std::span<const uint8_t> handle) {
  const auto body = decode_shared_handle(handle, kKind);
  if (body.size() != sizeof(uint64_t) + sizeof(cudaIpcMemHandle_t)) {
    fail("shared buffer: a cuda-ipc handle of {} bytes; expected {}", body.size(),
         sizeof(uint64_t) + sizeof(cudaIpcMemHandle_t));
  }
  uint64_t size = 0;
  cudaIpcMemHandle_t ipc{};
  std::memcpy(&size, body.data(), sizeof(size));
  std::memcpy(&ipc, body.data() + sizeof(size), sizeof(ipc));
  return std::make_unique<CudaIpcBuffer>(size, &ipc);
}

}  // namespace tern::cuda
