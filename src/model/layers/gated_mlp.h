#pragma once
// The SwiGLU feed-forward block: down(silu(gate(x)) * up(x)), with gate and up fused into one projection.
#include <string>

#include "backend/backend.h"
#include "model/layers/decoder_block.h"
#include "model/weight_loader.h"

namespace tern {

// Checkpoint names of the three projections: gate_proj/up_proj/down_proj (Hugging Face) or w1/w3/w2 (Mixtral,
// DeepSeek-V4).
struct MlpNames {
  std::string gate = "gate_proj";
  std::string up = "up_proj";
  std::string down = "down_proj";
};

class GatedMlp final : public FeedForwardBlock {
 public:
  // Loads `<prefix>.<names.gate>`, `<names.up>`, `<names.down>`; `activation` may clamp (DeepSeek-V4's swiglu_limit).
  GatedMlp(WeightLoader& weights, const std::string& prefix, int64_t hidden_size, int64_t intermediate_size,
           const MlpNames& names = {}, const GluActivation& activation = {});
  Tensor forward(Backend& backend, const Tensor& x) const;  // [T, hidden] -> [T, hidden]
  Tensor forward(Backend& backend, const BlockInput& input, const StepContext&) const override;

 private:
  // gate_up [T, 2 * intermediate] -> down(activation(gate, up)) [T, hidden]
  Tensor activate_down(Backend& backend, const Tensor& gate_up) const;
  // SiLU-and-mul without a clamp: the activation Backend::silu_mul computes.
  bool plain_swiglu() const;

  Tensor gate_up_weight_;  // [2 * intermediate, hidden]
  Tensor down_weight_;     // [hidden, intermediate]
  GluActivation activation_;
};

}  // namespace tern
