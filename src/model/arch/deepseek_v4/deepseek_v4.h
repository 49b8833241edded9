#pragma once
// DeepSeek-V4: mHC residual streams around every block; attention with a shared K=V head over a sliding window,
// plus compressed entries of earlier windows (HCA: all of them; CSA: the Lightning Indexer's top-k); MoE blocks
// with sqrt-softplus routing or token-id hash routing, clamped SwiGLU experts and a shared expert.
// Reads the checkpoint names transformers writes (model.layers.<i>.attn.wq_a, .ffn.experts.<e>.w1, head.weight) and
// DeepSeek's released checkpoints (layers.<i>.attn.wq_a, embed.weight: v4_checkpoint_names.h), with their FP8
// projections and FP4 experts dequantized as they load (docs/quantization.md). The MTP layer (mtp.0.*) is loaded
// apart, as speculative decoding's draft (deepseek_v4_mtp.h).
#include <memory>

#include "model/checkpoint.h"
#include "model/model.h"

namespace tern {

std::unique_ptr<Model> make_deepseek_v4_model(const ModelConfig& config, const Checkpoint& checkpoint,
                                              Backend& backend);

}  // namespace tern
