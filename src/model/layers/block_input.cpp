#include "model/layers/block_input.h"

namespace tern {

Tensor BlockInput::linear(const Tensor& weight, const Tensor* bias) const {
  if (normalized_) return backend_.linear(*normalized_, weight, bias);
  const Tensor projected = backend_.norm_linear(residual_, addend_ ? &*addend_ : nullptr, norm_weight_, eps_, weight, bias);
  addend_.reset();
  return projected;
}

const Tensor& BlockInput::normalized() const {
  if (!normalized_) {
    normalized_ = addend_ ? backend_.add_rms_norm(residual_, *addend_, norm_weight_, eps_)
                          : backend_.rms_norm(residual_, norm_weight_, eps_);
    addend_.reset();
  }
  return *normalized_;
}

}  // namespace tern
