#include "backend/expert_routing.h"

#include "core/error.h"

namespace tern {

MoeShape moe_shape(const Tensor& x, const ExpertRouting& routing, const ExpertWeights& experts) {
  MoeShape s;
  if (x.shape.empty() || experts.gate_up.shape.size() != 3 || experts.down.shape.size() != 3) {
    fail("moe_experts: expects x [T, H], gate_up [E, 2I, H] and down [E, H, I]");
  }
  s.num_experts = experts.gate_up.size(0);
  s.hidden = x.size(-1);
  s.intermediate = experts.gate_up.size(1) / 2;
  s.num_tokens = s.hidden ? x.numel() / s.hidden : 0;
  s.top_k = routing.expert_ids.shape.empty() ? 0 : routing.expert_ids.size(-1);
  if (experts.gate_up.size(2) != s.hidden || experts.down.size(0) != s.num_experts ||
      experts.down.size(1) != s.hidden || experts.down.size(2) != s.intermediate) {
    fail("moe_experts: expert weights do not fit hidden size {} and intermediate size {}", s.hidden, s.intermediate);
  }
  if (routing.expert_ids.numel() != s.num_tokens * s.top_k || routing.weights.numel() != s.num_tokens * s.top_k ||
      routing.expert_ids.dtype != DType::I32 || routing.weights.dtype != DType::F32) {
    fail("moe_experts: routing (int32 ids, float32 weights) covers a different number of tokens");
  }
  return s;
}

}  // namespace tern
