#pragma once
// DeepSeek-V3 (and V2-style MLA checkpoints with the same names): Multi-head Latent Attention, the first
// first_k_dense_replace layers dense, the rest sparse MoE with sigmoid scores, group-limited top-k, a selection
// bias (e_score_correction_bias), routed scaling and shared experts.
#include <memory>

#include "model/checkpoint.h"
#include "model/layers/decoder_stack.h"
#include "model/model.h"

namespace tern {

std::unique_ptr<Model> make_deepseek_v3_model(const ModelConfig& config, const Checkpoint& checkpoint,
                                              Backend& backend);

// The blocks of layer i as config.json describes them (MLA attention; a dense MLP below first_k_dense_replace, the
// sparse MoE from there on): for the decoder stack's layers and for the multi-token prediction layer after them
// (deepseek_mtp.h), which is built as its index would be.
DecoderLayerBuilder deepseek_v3_layer_builder(const ModelConfig& config, Backend& backend);

}  // namespace tern
