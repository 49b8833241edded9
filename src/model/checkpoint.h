#pragma once
// A Hugging Face model directory's weights: model.safetensors, or shards listed by model.safetensors.index.json.
#include <filesystem>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "model/safetensors.h"

namespace tern {

class LoadProgress;

class Checkpoint {
 public:
  // `progress`, where given, learns the checkpoint's size here and the bytes loaded from the WeightLoader.
  static Checkpoint open(const std::filesystem::path& dir, LoadProgress* progress = nullptr);

  bool has(const std::string& name) const { return index_.count(name) != 0; }
  // The tensor `name`; fails naming the file and tensor if it is missing or its shape differs from `shape`.
  const TensorInfo& get(const std::string& name, const std::vector<int64_t>& shape) const;
  const TensorInfo& get(const std::string& name) const;
  std::vector<std::string> names() const;
  LoadProgress* progress() const { return progress_; }

 private:
  std::filesystem::path dir_;
  std::vector<std::shared_ptr<const SafetensorsFile>> files_;
  std::unordered_map<std::string, const TensorInfo*> index_;
  LoadProgress* progress_ = nullptr;
};

}  // namespace tern
