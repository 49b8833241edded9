#pragma once
// Loads checkpoint tensors onto a backend, checking each name and shape against what the architecture expects.
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "model/checkpoint.h"

namespace tern {

class WeightLoader {
 public:
  WeightLoader(const Checkpoint& checkpoint, Backend& backend) : checkpoint_(checkpoint), backend_(backend) {}

  Tensor load(const std::string& name, const std::vector<int64_t>& shape);
  // Tensors concatenated along dimension 0, each checked against its own shape (e.g. q, k and v projections).
  Tensor load_concat(const std::vector<std::pair<std::string, std::vector<int64_t>>>& parts);
  std::optional<Tensor> load_optional(const std::string& name, const std::vector<int64_t>& shape);
  bool has(const std::string& name) const { return checkpoint_.has(name); }
  // The checkpoint tensor itself, for weights that need re-laying out on the host before loading.
  const TensorInfo& info(const std::string& name, const std::vector<int64_t>& shape) const {
    return checkpoint_.get(name, shape);
  }
  Backend& backend() { return backend_; }

 private:
  const Checkpoint& checkpoint_;
  Backend& backend_;
};

}  // namespace tern
