#pragma once
// SharedBuffer in POSIX shared memory (shm_open + mmap) for the CPU backend, whose KV cache is host memory. The
// creator unlinks the name when it is destroyed; a process that opened it keeps its mapping until it closes it.
#include <memory>
#include <span>

#include "backend/shared_buffer.h"

namespace tern {

std::unique_ptr<SharedBuffer> create_posix_shared_buffer(size_t bytes);
std::unique_ptr<SharedBuffer> open_posix_shared_buffer(std::span<const uint8_t> handle);

}  // namespace tern
