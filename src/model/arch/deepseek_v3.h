#pragma once
// DeepSeek-V3 (and V2-style MLA checkpoints with the same names): Multi-head Latent Attention, the first
// first_k_dense_replace layers dense, the rest sparse MoE with sigmoid scores, group-limited top-k, a selection
// bias (e_score_correction_bias), routed scaling and shared experts.
#include <memory>

#include "model/checkpoint.h"
#include "model/model.h"

namespace tern {

std::unique_ptr<Model> make_deepseek_v3_model(const ModelConfig& config, const Checkpoint& checkpoint,
                                              Backend& backend);

}  // namespace tern
