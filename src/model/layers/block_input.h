#pragma once
// A block's input as the decoder shell hands it on: rms_norm(residual + addend), the previous block's output not yet
// added and the norm not yet run. A block whose first op is one projection asks for the projection of the
// normalized input (linear), which the backend can run as one op with the add and the norm (Backend::norm_linear:
// on the CUDA backend at batch 1, one GEMV instead of a norm kernel and a GEMV); a block that reads its input more
// than once asks for the input itself (normalized). The first of the two adds the addend into the residual.
#include <optional>

#include "backend/backend.h"

namespace tern {

class BlockInput {
 public:
  // `residual` [T, hidden] must outlive the input; without an addend it is only read.
  BlockInput(Backend& backend, Tensor& residual, std::optional<Tensor> addend, const Tensor& norm_weight, float eps)
      : backend_(backend), residual_(residual), addend_(std::move(addend)), norm_weight_(norm_weight), eps_(eps) {}

  int64_t num_tokens() const { return residual_.size(0); }
  // linear(x, weight, bias) of the normalized input x (Backend::norm_linear).
  Tensor linear(const Tensor& weight, const Tensor* bias = nullptr) const;
  // x itself, made once.
  const Tensor& normalized() const;

 private:
  Backend& backend_;
  Tensor& residual_;
  mutable std::optional<Tensor> addend_;  // reset once added into the residual
  const Tensor& norm_weight_;
  float eps_;
  mutable std::optional<Tensor> normalized_;
};

}  // namespace tern
