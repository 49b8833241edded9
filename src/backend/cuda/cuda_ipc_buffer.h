#pragma once
// SharedBuffer in device memory, shared with another process through CUDA IPC (cudaIpcGetMemHandle /
// cudaIpcOpenMemHandle). The opener may run on another GPU of the host: its copies from the buffer are then peer
// copies (peer access is enabled on open). A process cannot open its own handle (CUDA refuses), so both ends of a
// transfer are separate processes.
#include <memory>
#include <span>

#include "backend/shared_buffer.h"

namespace tern::cuda {

// On the calling thread's current device.
std::unique_ptr<SharedBuffer> create_ipc_buffer(size_t bytes);
std::unique_ptr<SharedBuffer> open_ipc_buffer(std::span<const uint8_t> handle);

}  // namespace tern::cuda
