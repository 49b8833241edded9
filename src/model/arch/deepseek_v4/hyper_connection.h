#pragma once
// Manifold-constrained hyper-connections (mHC): the residual is num_streams parallel streams [T, N, H]. Around a
// block, a projection of the RMS-normalized streams gives the collapse weights (streams -> block input), the expand
// weights (block output -> streams) and a doubly-stochastic N x N stream mix (Sinkhorn-Knopp).
#include <string>

#include "backend/backend.h"
#include "model/weight_loader.h"

namespace tern {

class HyperConnection {
 public:
  // Loads fn [mix_width, N * hidden], base [mix_width] and scale ([3], or [1] for the final head whose
  // mix_width is N).
  HyperConnection(WeightLoader& weights, const std::string& fn_name, const std::string& base_name,
                  const std::string& scale_name, int64_t hidden_size, const HyperMixParams& params, bool head,
                  float norm_eps);

  // streams [T, N, H] -> the mix weights hyper_expand takes and the streams collapsed by them (the block's input).
  HyperMixed collapse(Backend& backend, const Tensor& streams) const;

 private:
  Tensor fn_;     // [mix_width, N * hidden]
  Tensor base_;   // [mix_width]
  Tensor scale_;  // [3] or [1]
  Tensor ones_;   // [N * hidden]: the weight of the unweighted input norm
  HyperMixParams params_;
  float norm_eps_;
};

}  // namespace tern
