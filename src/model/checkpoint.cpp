#include "model/checkpoint.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/load_progress.h"

namespace tern {

Checkpoint Checkpoint::open(const std::filesystem::path& dir, LoadProgress* progress) {
  Checkpoint checkpoint;
  checkpoint.dir_ = dir;
  checkpoint.progress_ = progress;
  const auto single = dir / "model.safetensors";
  const auto index_path = dir / "model.safetensors.index.json";
  std::map<std::string, std::string> expected_file;  // tensor -> shard named by the index
  std::vector<std::filesystem::path> shard_paths;
  if (std::filesystem::exists(index_path)) {
    nlohmann::json index;
    try {
      std::ifstream in(index_path);
      index = nlohmann::json::parse(in);
      for (const auto& [tensor, file] : index.at("weight_map").items()) expected_file[tensor] = file.get<std::string>();
    } catch (const nlohmann::json::exception& e) {
      fail("{}: malformed index: {}", index_path.string(), e.what());
    }
    std::vector<std::string> shards;
    for (const auto& [tensor, file] : expected_file) shards.push_back(file);
    std::sort(shards.begin(), shards.end());
    shards.erase(std::unique(shards.begin(), shards.end()), shards.end());
    for (const auto& shard : shards) {
      if (shard.find('/') != std::string::npos) fail("{}: shard name '{}' leaves the model directory", index_path.string(), shard);
      shard_paths.push_back(dir / shard);
    }
  } else if (std::filesystem::exists(single)) {
    shard_paths.push_back(single);
  } else {
    fail("{}: no model.safetensors or model.safetensors.index.json", dir.string());
  }

  int64_t total_bytes = 0;
  for (const auto& path : shard_paths) {
    if (!std::filesystem::exists(path)) fail("{}: shard listed in the index is missing", path.string());
    checkpoint.files_.push_back(SafetensorsFile::open(path));
    for (const auto& [name, info] : checkpoint.files_.back()->tensors()) {
      if (checkpoint.index_.count(name)) fail("{}: tensor '{}' appears in two shards", path.string(), name);
      checkpoint.index_[name] = &info;
      total_bytes += static_cast<int64_t>(info.size_bytes);
    }
  }
  if (progress) progress->set_total(total_bytes);
  for (const auto& [tensor, file] : expected_file) {
    auto it = checkpoint.index_.find(tensor);
    if (it == checkpoint.index_.end()) {
      fail("{}: tensor '{}' listed in the index is not in the shard", (dir / file).string(), tensor);
    }
    if (it->second->file.filename() != file) {
      fail("{}: tensor '{}' is in {}, not in {} as the index says", index_path.string(), tensor,
           it->second->file.filename().string(), file);
    }
  }
  return checkpoint;
}

const TensorInfo& Checkpoint::get(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end()) fail("{}: missing tensor '{}'", dir_.string(), name);
  return *it->second;
}

const TensorInfo& Checkpoint::get(const std::string& name, const std::vector<int64_t>& shape) const {
  const TensorInfo& info = get(name);
  if (info.shape != shape) {
    fail("{}: tensor '{}' has shape {}, expected {}", info.file.string(), name, shape_string(info.shape),
         shape_string(shape));
  }
  return info;
}

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> out;
  for (const auto& [name, info] : index_) out.push_back(name);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace tern
