#pragma once
// Llama, Mistral, Qwen2 and Qwen3: one pre-norm decoder that differs only by q/k/v bias (Qwen2), per-head q/k
// RMSNorm (Qwen3), rope scaling and tied embeddings.
#include <memory>

#include "model/checkpoint.h"
#include "model/model.h"

namespace tern {

std::unique_ptr<Model> make_llama_family_model(const ModelConfig& config, const Checkpoint& checkpoint,
                                               Backend& backend);

}  // namespace tern
