#include "model/layers/moe_router.h"

#include <cstring>

#include "core/error.h"

namespace tern {

namespace {

// The checkpoint's token->expert table (int64 or int32) as int32 on the backend.
Tensor load_hash_table(WeightLoader& weights, const std::string& name, int64_t vocab, int64_t top_k) {
  const TensorInfo& info = weights.info(name, {vocab, top_k});
  std::vector<int32_t> ids(info.numel());
  if (info.dtype == DType::I64) {
    for (size_t i = 0; i < ids.size(); ++i) {
      int64_t id;
      std::memcpy(&id, info.data + i * sizeof(int64_t), sizeof(id));
      ids[i] = static_cast<int32_t>(id);
    }
  } else if (info.dtype == DType::I32) {
    std::memcpy(ids.data(), info.data, ids.size() * sizeof(int32_t));
  } else {
    fail("{}: tensor '{}' must hold integers, got {}", info.file.string(), name, dtype_name(info.dtype));
  }
  return weights.backend().from_host_i32(ids, {vocab, top_k});
}

}  // namespace

MoeRouter::MoeRouter(WeightLoader& weights, const std::string& prefix, const MoeRouterConfig& config)
    : config_(config) {
  weight_ = weights.load(prefix + ".weight", {config.num_experts, config.hidden_size});
  if (config.logit_bias) logit_bias_ = weights.load(prefix + ".bias", {config.num_experts});
  if (!config.selection_bias_name.empty()) {
    selection_bias_ = weights.load(prefix + "." + config.selection_bias_name, {config.num_experts});
  }
  if (config.hash_table) {
    hash_table_ = load_hash_table(weights, prefix + ".tid2eid", config.vocab_size, config.params.top_k);
  }
}

ExpertRouting MoeRouter::route(Backend& backend, const Tensor& x, const StepContext& step,
                               const ExpertLoadBalancing& balancing) const {
  const Tensor logits = backend.linear_f32(x, weight_, logit_bias_ ? &*logit_bias_ : nullptr);
  RouterParams params = config_.params;
  params.selection_bias = selection_bias_ ? &*selection_bias_ : nullptr;
  params.token_expert_table = hash_table_ ? &*hash_table_ : nullptr;
  params.balancing = balancing;
  return backend.route_experts(logits, params, step);
}

}  // namespace tern
