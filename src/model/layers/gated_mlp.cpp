#include "model/layers/gated_mlp.h"

namespace tern {

GatedMlp::GatedMlp(WeightLoader& weights, const std::string& prefix, int64_t hidden_size, int64_t intermediate_size,
                   const MlpNames& names, const GluActivation& activation)
    : activation_(activation) {
  // Tensor parallelism: gate/up are column-parallel (each rank keeps its share of both halves), down is
  // row-parallel and an all-reduce sums the ranks' parts.
  WeightLoader linear = weights.linear_weights();
  gate_up_weight_ = linear.load_row_shards({{prefix + "." + names.gate + ".weight", {intermediate_size, hidden_size}},
                                            {prefix + "." + names.up + ".weight", {intermediate_size, hidden_size}}});
  down_weight_ = linear.load_column_shard(prefix + "." + names.down + ".weight", {hidden_size, intermediate_size});
}

Tensor GatedMlp::forward(Backend& backend, const Tensor& x) const {
  return activate_down(backend, backend.linear(x, gate_up_weight_, nullptr));
}

Tensor GatedMlp::forward(Backend& backend, const BlockInput& input, const StepContext&) const {
  if (plain_swiglu()) return backend.linear_all_reduce(input.linear_silu_mul(gate_up_weight_), down_weight_, nullptr);
  return activate_down(backend, input.linear(gate_up_weight_));
}

bool GatedMlp::plain_swiglu() const {
  return activation_.kind == GluActivation::Kind::silu && activation_.limit <= 0.0f;
}

Tensor GatedMlp::activate_down(Backend& backend, const Tensor& gate_up) const {
  const Tensor activated = plain_swiglu() ? backend.silu_mul(gate_up) : backend.gated_activation(gate_up, activation_);
  return backend.linear_all_reduce(activated, down_weight_, nullptr);
}

}  // namespace tern
