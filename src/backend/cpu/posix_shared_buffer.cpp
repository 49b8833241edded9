#include "backend/cpu/posix_shared_buffer.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <string>

#include "core/error.h"

namespace tern {

namespace {

constexpr std::string_view kKind = "posix-shm";

class PosixSharedBuffer final : public SharedBuffer {
 public:
  PosixSharedBuffer(std::string name, size_t size, bool owner) : name_(std::move(name)), size_(size), owner_(owner) {
    const int fd = shm_open(name_.c_str(), owner ? O_RDWR | O_CREAT | O_EXCL : O_RDWR, 0600);
    if (fd < 0) fail("shared buffer {}: shm_open: {}", name_, std::strerror(errno));
    if (owner && ftruncate(fd, static_cast<off_t>(size_)) != 0) {
      const int error = errno;
      close(fd);
      shm_unlink(name_.c_str());
      fail("shared buffer {}: {} bytes: {}", name_, size_, std::strerror(error));
    }
    struct stat info{};
    if (!owner && (fstat(fd, &info) != 0 || static_cast<size_t>(info.st_size) < size_)) {
      close(fd);
      fail("shared buffer {}: smaller than the {} bytes its handle says", name_, size_);
    }
    data_ = mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);  // the mapping keeps the memory
    if (data_ == MAP_FAILED) {
      if (owner) shm_unlink(name_.c_str());
      fail("shared buffer {}: mmap: {}", name_, std::strerror(errno));
    }
  }

  ~PosixSharedBuffer() override {
    munmap(data_, size_);
    if (owner_) shm_unlink(name_.c_str());
  }

  void* data() const override { return data_; }
  size_t size() const override { return size_; }

  std::vector<uint8_t> handle() const override {
    std::vector<uint8_t> body(sizeof(uint64_t));
    const auto size = static_cast<uint64_t>(size_);
    std::memcpy(body.data(), &size, sizeof(size));
    body.insert(body.end(), name_.begin(), name_.end());
    return encode_shared_handle(kKind, body);
  }

 private:
  std::string name_;
  size_t size_;
  bool owner_;
  void* data_ = nullptr;
};

}  // namespace

std::unique_ptr<SharedBuffer> create_posix_shared_buffer(size_t bytes) {
  static std::atomic<uint64_t> next{0};
  const std::string name = "/tern-kv-" + std::to_string(getpid()) + "-" + std::to_string(next++);
  return std::make_unique<PosixSharedBuffer>(name, bytes, true);
}

std::unique_ptr<SharedBuffer> open_posix_shared_buffer(std::span<const uint8_t> handle) {
  const auto body = decode_shared_handle(handle, kKind);
  if (body.size() <= sizeof(uint64_t)) fail("shared buffer: a posix-shm handle of {} bytes is cut short", body.size());
  uint64_t size = 0;
  std::memcpy(&size, body.data(), sizeof(size));
  const std::string name(body.begin() + sizeof(uint64_t), body.end());
  if (name.front() != '/' || name.find('/', 1) != std::string::npos) fail("shared buffer: '{}' is not a shm name", name);
  return std::make_unique<PosixSharedBuffer>(name, size, false);
}

}  // namespace tern
