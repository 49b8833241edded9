#include "model/arch/deepseek_v4/hyper_connection.h"

namespace tern {

HyperConnection::HyperConnection(WeightLoader& weights, const std::string& fn_name, const std::string& base_name,
                                 const std::string& scale_name, int64_t hidden_size, const HyperMixParams& params,
                                 bool head, float norm_eps)
    : params_(params), norm_eps_(norm_eps) {
  const int64_t n = params.num_streams;
  const int64_t mix_width = head ? n : (2 + n) * n;
  fn_ = weights.load(fn_name, {mix_width, n * hidden_size});
  base_ = weights.load(base_name, {mix_width});
  scale_ = weights.load(scale_name, {head ? 1 : 3});
  ones_ = weights.backend().from_host_f32(std::vector<float>(n * hidden_size, 1.0f), {n * hidden_size});
}

HyperMixed HyperConnection::collapse(Backend& backend, const Tensor& streams) const {
  const Tensor flat = streams.reshape({streams.size(0), streams.row_numel()});
  // Float32 mixes where the backend's activations are narrower: Sinkhorn-Knopp amplifies their rounding.
  const Tensor mixes = backend.rms_norm_linear_f32(flat, ones_, norm_eps_, fn_);
  return backend.hyper_mix_collapse(streams, mixes, base_, scale_, params_);
}

}  // namespace tern
