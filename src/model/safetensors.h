#pragma once
// A memory-mapped .safetensors file: an 8-byte little-endian header length, a JSON header naming each tensor's
// dtype, shape and byte range, then the raw data. Every field is validated at open time, so that a truncated or
// corrupt file is reported with the file and tensor name instead of being read out of bounds later.
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor_info.h"

namespace tern {

class SafetensorsFile {
 public:
  static std::shared_ptr<const SafetensorsFile> open(const std::filesystem::path& path);

  const std::filesystem::path& path() const { return path_; }
  const std::map<std::string, TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find(const std::string& name) const;

  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

 private:
  SafetensorsFile() = default;
  std::filesystem::path path_;
  void* mapping_ = nullptr;
  size_t mapping_bytes_ = 0;
  std::map<std::string, TensorInfo> tensors_;
};

struct NamedTensorF32 {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> values;
};

// Writes tensors of any dtype (each one's name, dtype, shape and size_bytes bytes at data) to a .safetensors file.
void write_safetensors(const std::filesystem::path& path, const std::vector<TensorInfo>& tensors);
// Writes float32 tensors to a .safetensors file.
void write_safetensors_f32(const std::filesystem::path& path, const std::vector<NamedTensorF32>& tensors);

}  // namespace tern
