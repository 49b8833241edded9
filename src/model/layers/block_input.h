#pragma once
// A block's input as the decoder shell hands it on: rms_norm(residual + addend), the previous block's output not yet
// added and the norm not yet run. A block whose first op is one projection asks for the projection of the
// normalized input (linear, or with the op after it: linear_silu_mul, linear_rope_store_kv), which the backend can
// run as one op with the add and the norm (Backend::norm_linear and its kin: on the CUDA backend at batch 1, one
// GEMV instead of three kernels); a block that reads its input more than once asks for the input itself
// (normalized). The first of these adds the addend into the residual.
#include <optional>

#include "backend/backend.h"

namespace tern {

class BlockInput {
 public:
  // `residual` [T, hidden] must outlive the input; without an addend it is only read.
  BlockInput(Backend& backend, Tensor& residual, std::optional<Tensor> addend, const Tensor& norm_weight, float eps)
      : backend_(backend), residual_(&residual), addend_(std::move(addend)), norm_weight_(&norm_weight), eps_(eps) {}
  // An input its caller normalized already, read as it is (EAGLE-3's layer normalizes the embedding and the hidden
  // state apart and reads them side by side): no residual to add into.
  BlockInput(Backend& backend, Tensor normalized) : backend_(backend), normalized_(std::move(normalized)) {}

  int64_t num_tokens() const { return residual_ ? residual_->size(0) : normalized_->size(0); }
  // linear(x, weight, bias) of the normalized input x (Backend::norm_linear).
  Tensor linear(const Tensor& weight, const Tensor* bias = nullptr) const;
  // silu_mul(linear(x, gate_up_weight)) (Backend::norm_linear_silu_mul).
  Tensor linear_silu_mul(const Tensor& gate_up_weight) const;
  // The rotated queries of linear(x, qkv_weight, qkv_bias), its rotated keys and values stored to the cache
  // (Backend::norm_linear_rope_store_kv).
  Tensor linear_rope_store_kv(const Tensor& qkv_weight, const Tensor* qkv_bias, const QkvHeads& heads,
                              const RopeTable& table, KvCache& cache, int layer, const StepContext& step) const;
  // x itself, made once.
  const Tensor& normalized() const;

 private:
  Backend& backend_;
  Tensor* residual_ = nullptr;  // null for an input normalized already
  mutable std::optional<Tensor> addend_;  // reset once added into the residual
  const Tensor* norm_weight_ = nullptr;
  float eps_ = 0.0f;
  mutable std::optional<Tensor> normalized_;

  // op(PreNorm) for a fused op, which adds the addend into the residual (never for an input normalized already).
  template <typename Op>
  Tensor with_pre_norm(Op op) const {
    PreNorm input{*residual_, addend_ ? &*addend_ : nullptr, *norm_weight_, eps_};
    Tensor out = op(input);
    addend_.reset();
    return out;
  }
};

}  // namespace tern
