#include "model/weight_loader.h"

namespace tern {

Tensor WeightLoader::load(const std::string& name, const std::vector<int64_t>& shape) {
  const TensorInfo* part = &checkpoint_.get(name, shape);
  return backend_.load_weight({&part, 1});
}

Tensor WeightLoader::load_concat(const std::vector<std::pair<std::string, std::vector<int64_t>>>& parts) {
  std::vector<const TensorInfo*> infos;
  for (const auto& [name, shape] : parts) infos.push_back(&checkpoint_.get(name, shape));
  return backend_.load_weight(infos);
}

std::optional<Tensor> WeightLoader::load_optional(const std::string& name, const std::vector<int64_t>& shape) {
  if (!checkpoint_.has(name)) return std::nullopt;
  return load(name, shape);
}

}  // namespace tern
