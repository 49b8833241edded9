#include "model/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace tern {

namespace {

DType parse_dtype(const std::string& name, const std::filesystem::path& file, const std::string& tensor) {
  if (name == "BF16") return DType::BF16;
  if (name == "F16") return DType::F16;
  if (name == "F32") return DType::F32;
  if (name == "I32") return DType::I32;
  if (name == "I64") return DType::I64;
  if (name == "F8_E4M3") return DType::F8_E4M3;
  if (name == "F8_E8M0") return DType::F8_E8M0;
  if (name == "U8") return DType::U8;
  // One byte each, 0 or 1 (EAGLE-3 heads store their t2d mask so): read as bytes, which no weight is.
  if (name == "BOOL") return DType::U8;
  if (name == "I8") return DType::I8;
  fail("{}: tensor '{}' has unsupported dtype {} (supported: BF16, F16, F32, I32, I64, F8_E4M3, F8_E8M0, U8, BOOL, "
       "I8)",
       file.string(), tensor, name);
}

// A safetensors header is a few KB to a few MB; anything past this is corruption, not a model.
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

}  // namespace

std::shared_ptr<const SafetensorsFile> SafetensorsFile::open(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("{}: cannot open: {}", path.string(), std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    fail("{}: cannot stat: {}", path.string(), std::strerror(errno));
  }
  const size_t file_bytes = static_cast<size_t>(st.st_size);
  if (file_bytes < 8) {
    ::close(fd);
    fail("{}: truncated safetensors file ({} bytes, no header)", path.string(), file_bytes);
  }
  void* mapping = ::mmap(nullptr, file_bytes, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (mapping == MAP_FAILED) fail("{}: mmap failed: {}", path.string(), std::strerror(errno));

  std::shared_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->path_ = path;
  file->mapping_ = mapping;
  file->mapping_bytes_ = file_bytes;
  const auto* bytes = static_cast<const std::byte*>(mapping);

  uint64_t header_bytes = 0;
  std::memcpy(&header_bytes, bytes, 8);
  if (header_bytes > kMaxHeaderBytes || header_bytes > file_bytes - 8) {
    fail("{}: corrupt safetensors header length {} (file is {} bytes)", path.string(), header_bytes, file_bytes);
  }
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(reinterpret_cast<const char*>(bytes + 8),
                                   reinterpret_cast<const char*>(bytes + 8 + header_bytes));
  } catch (const nlohmann::json::exception& e) {
    fail("{}: corrupt safetensors header: {}", path.string(), e.what());
  }
  if (!header.is_object()) fail("{}: corrupt safetensors header: not a JSON object", path.string());

  const std::byte* data_start = bytes + 8 + header_bytes;
  const size_t data_bytes = file_bytes - 8 - header_bytes;
  std::vector<std::pair<size_t, size_t>> ranges;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") continue;
    try {
      TensorInfo info;
      info.name = name;
      info.file = path;
      info.dtype = parse_dtype(entry.at("dtype").get<std::string>(), path, name);
      info.shape = entry.at("shape").get<std::vector<int64_t>>();
      const auto offsets = entry.at("data_offsets").get<std::vector<uint64_t>>();
      if (offsets.size() != 2 || offsets[0] > offsets[1]) {
        fail("{}: tensor '{}' has invalid data_offsets", path.string(), name);
      }
      if (offsets[1] > data_bytes) {
        fail("{}: tensor '{}' ends at byte {} but the file holds only {} data bytes (truncated file?)", path.string(),
             name, offsets[1], data_bytes);
      }
      for (int64_t d : info.shape) {
        if (d < 0) fail("{}: tensor '{}' has a negative dimension", path.string(), name);
      }
      info.size_bytes = offsets[1] - offsets[0];
      if (static_cast<uint64_t>(info.numel()) * dtype_size(info.dtype) != info.size_bytes) {
        fail("{}: tensor '{}' of shape {} and dtype {} needs {} bytes but has {}", path.string(), name,
             shape_string(info.shape), dtype_name(info.dtype), info.numel() * dtype_size(info.dtype), info.size_bytes);
      }
      info.data = data_start + offsets[0];
      ranges.emplace_back(offsets[0], offsets[1]);
      file->tensors_.emplace(name, std::move(info));
    } catch (const nlohmann::json::exception& e) {
      fail("{}: tensor '{}' has a malformed header entry: {}", path.string(), name, e.what());
    }
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) {
    if (ranges[i].first < ranges[i - 1].second) fail("{}: tensors overlap in the data section", path.string());
  }
  return file;
}

const TensorInfo* SafetensorsFile::find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

SafetensorsFile::~SafetensorsFile() {
  if (mapping_) ::munmap(mapping_, mapping_bytes_);
}

void write_safetensors(const std::filesystem::path& path, const std::vector<TensorInfo>& tensors) {
  nlohmann::json header = nlohmann::json::object();
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    if (t.size_bytes != static_cast<size_t>(t.numel()) * dtype_size(t.dtype)) {
      fail("{}: tensor '{}' has {} bytes for {} {} values", path.string(), t.name, t.size_bytes, t.numel(),
           dtype_name(t.dtype));
    }
    header[t.name] = {{"dtype", std::string(dtype_name(t.dtype))},
                     {"shape", t.shape},
                     {"data_offsets", {offset, offset + t.size_bytes}}};
    offset += t.size_bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // keeps the data section 8-byte aligned
  std::ofstream out(path, std::ios::binary);
  if (!out) fail("{}: cannot open for writing", path.string());
  const uint64_t header_bytes = text.size();
  out.write(reinterpret_cast<const char*>(&header_bytes), 8);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  for (const auto& t : tensors) out.write(reinterpret_cast<const char*>(t.data), static_cast<std::streamsize>(t.size_bytes));
  if (!out) fail("{}: write failed", path.string());
}

void write_safetensors_f32(const std::filesystem::path& path, const std::vector<NamedTensorF32>& tensors) {
  std::vector<TensorInfo> infos;
  for (const auto& t : tensors) {
    infos.push_back({t.name, path, DType::F32, t.shape, reinterpret_cast<const std::byte*>(t.values.data()),
                     t.values.size() * sizeof(float), {}});
  }
  write_safetensors(path, infos);
}

}  // namespace tern
