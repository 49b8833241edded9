#pragma once
// Mixtral, Qwen3-MoE and gpt-oss: the pre-norm GQA decoder of the Llama family with a sparse MoE feed-forward.
// They differ by checkpoint layout, router (softmax top-k, normalized or not; gpt-oss's router bias), activation
// (SwiGLU or gpt-oss's clamped GLU) and attention details (Qwen3's q/k norm, gpt-oss's biases, sinks and
// alternating sliding-window layers).
#include <memory>

#include "model/checkpoint.h"
#include "model/model.h"

namespace tern {

std::unique_ptr<Model> make_sparse_moe_family_model(const ModelConfig& config, const Checkpoint& checkpoint,
                                                    Backend& backend);

}  // namespace tern
