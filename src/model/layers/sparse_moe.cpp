#include "model/layers/sparse_moe.h"

#include <cstring>

#include "core/error.h"

namespace tern {

namespace {

// Loads `name` after moving its elements on the host: element i of the result is element source_index(i) of the
// checkpoint tensor. Used to bring gpt-oss's [E, in, out] expert layout to the [E, out, in] the backend expects
// (for this rank's experts only under expert parallelism).
template <typename SourceIndex>
Tensor load_relaid(WeightLoader& weights, const std::string& name, const std::vector<int64_t>& shape,
                   std::vector<int64_t> result_shape, SourceIndex source_index) {
  const TensorInfo& info = weights.info(name, shape);
  const size_t element = dtype_size(info.dtype);
  int64_t n = 1;
  for (int64_t d : result_shape) n *= d;
  std::vector<std::byte> bytes(static_cast<size_t>(n) * element);
  for (int64_t i = 0; i < n; ++i) {
    std::memcpy(bytes.data() + i * element, info.data + source_index(i) * element, element);
  }
  TensorInfo relaid = info;
  relaid.shape = std::move(result_shape);
  relaid.data = bytes.data();
  relaid.size_bytes = bytes.size();
  const TensorInfo* part = &relaid;
  return weights.backend().load_weight({&part, 1});
}

}  // namespace

SparseMoe::SparseMoe(WeightLoader& weights, const std::string& prefix, const SparseMoeConfig& config)
    : activation_(config.activation), expert_parallel_(weights.backend().expert_parallel()) {
  const int64_t hidden = config.hidden_size;
  const int64_t inter = config.intermediate_size;
  const int64_t num_experts = config.router.num_experts;
  // This rank's experts: [first, first + local).
  const int64_t local = expert_parallel_ ? weights.shard_count(num_experts, "experts") : num_experts;
  const int64_t first = expert_parallel_ ? weights.shard().rank * local : 0;
  first_expert_ = first;
  router_.emplace(weights, prefix + "." + config.router_name, config.router);
  if (config.layout == ExpertLayout::per_expert) {
    std::vector<std::pair<std::string, std::vector<int64_t>>> gate_up, down;
    for (int64_t e = first; e < first + local; ++e) {
      const std::string expert = prefix + ".experts." + std::to_string(e) + ".";
      gate_up.push_back({expert + config.expert_names.gate + ".weight", {inter, hidden}});
      gate_up.push_back({expert + config.expert_names.up + ".weight", {inter, hidden}});
      down.push_back({expert + config.expert_names.down + ".weight", {hidden, inter}});
    }
    gate_up_ = weights.load_concat(gate_up).reshape({local, 2 * inter, hidden});
    down_ = weights.load_concat(down).reshape({local, hidden, inter});
  } else {
    // gpt-oss stores x @ W ([E, H, 2I], gate and up alternating along 2I) and x @ D ([E, I, H]).
    const std::string experts = prefix + ".experts.";
    gate_up_ = load_relaid(weights, experts + "gate_up_proj", {num_experts, hidden, 2 * inter},
                           {local, 2 * inter, hidden}, [&](int64_t i) {
                             const int64_t h = i % hidden, row = (i / hidden) % (2 * inter),
                                           e = first + i / (hidden * 2 * inter);
                             const int64_t column = row < inter ? 2 * row : 2 * (row - inter) + 1;
                             return (e * hidden + h) * 2 * inter + column;
                           });
    gate_up_bias_ = load_relaid(weights, experts + "gate_up_proj_bias", {num_experts, 2 * inter},
                                {local, 2 * inter}, [&](int64_t i) {
                                  const int64_t row = i % (2 * inter), e = first + i / (2 * inter);
                                  return e * 2 * inter + (row < inter ? 2 * row : 2 * (row - inter) + 1);
                                });
    down_ = load_relaid(weights, experts + "down_proj", {num_experts, inter, hidden}, {local, hidden, inter},
                        [&](int64_t i) {
                          const int64_t j = i % inter, h = (i / inter) % hidden, e = first + i / (inter * hidden);
                          return (e * inter + j) * hidden + h;
                        });
    down_bias_ = weights.load_row_ranges({{experts + "down_proj_bias", {num_experts, hidden}, first, local}});
  }
  if (config.shared_intermediate_size > 0) {
    shared_experts_.emplace(weights, prefix + "." + config.shared_name, hidden, config.shared_intermediate_size,
                            config.expert_names, config.activation);
  }
}

Tensor SparseMoe::forward(Backend& backend, const Tensor& x, const StepContext& step) const {
  const ExpertRouting routing = router_->route(backend, x, step);
  ExpertWeights experts{gate_up_, down_, gate_up_bias_ ? &*gate_up_bias_ : nullptr,
                        down_bias_ ? &*down_bias_ : nullptr, first_expert_};
  Tensor out = backend.moe_experts(x, routing, experts, activation_);
  // Each rank added its own experts' outputs; every rank needs every expert's.
  if (expert_parallel_) backend.all_reduce_sum(out);
  if (shared_experts_) backend.add_in_place(out, shared_experts_->forward(backend, x));
  return out;
}

}  // namespace tern
