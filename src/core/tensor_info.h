#pragma once
// A read-only view of a tensor in host memory, such as a checkpoint tensor in a memory-mapped file.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace tern {

struct TensorInfo {
  std::string name;
  std::filesystem::path file;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  const std::byte* data = nullptr;  // valid while the owner of the memory (e.g. the mapped file) lives
  size_t size_bytes = 0;

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
};

std::string shape_string(const std::vector<int64_t>& shape);

}  // namespace tern
