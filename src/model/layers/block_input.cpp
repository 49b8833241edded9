#include "model/layers/block_input.h"

namespace tern {

Tensor BlockInput::linear(const Tensor& weight, const Tensor* bias) const {
  if (normalized_) return backend_.linear(*normalized_, weight, bias);
  return with_pre_norm([&](PreNorm& input) { return backend_.norm_linear(input, weight, bias); });
}

Tensor BlockInput::linear_silu_mul(const Tensor& gate_up_weight) const {
  if (normalized_) return backend_.silu_mul(backend_.linear(*normalized_, gate_up_weight, nullptr));
  return with_pre_norm([&](PreNorm& input) { return backend_.norm_linear_silu_mul(input, gate_up_weight); });
}

Tensor BlockInput::linear_rope_store_kv(const Tensor& qkv_weight, const Tensor* qkv_bias, const QkvHeads& heads,
                                        const RopeTable& table, KvCache& cache, int layer,
                                        const StepContext& step) const {
  if (normalized_) {
    const Tensor qkv = backend_.linear(*normalized_, qkv_weight, qkv_bias);
    return backend_.rope_store_qkv(qkv, heads, table, cache, layer, step);
  }
  return with_pre_norm([&](PreNorm& input) {
    return backend_.norm_linear_rope_store_kv(input, qkv_weight, qkv_bias, heads, table, cache, layer, step);
  });
}

const Tensor& BlockInput::normalized() const {
  if (!normalized_) {
    normalized_ = addend_ ? backend_.add_rms_norm(*residual_, *addend_, *norm_weight_, eps_)
                          : backend_.rms_norm(*residual_, *norm_weight_, eps_);
    addend_.reset();
  }
  return *normalized_;
}

}  // namespace tern
