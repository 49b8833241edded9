#pragma once
// The two kinds of block a decoder layer holds, as interfaces, so that the decoder shell (decoder_stack.h) is written
// once for every architecture: self-attention over the paged KV cache (GQA, MLA, DeepSeek-V4's) and a
// position-wise feed-forward block (SwiGLU MLP, mixture of experts).
#include "backend/backend.h"

namespace tern {

class AttentionBlock {
 public:
  virtual ~AttentionBlock() = default;
  // What the layer keeps in the KV cache per token.
  virtual KvLayerSpec kv_spec() const = 0;
  // x [T, hidden] (normalized block input) -> [T, hidden]; writes the step's tokens into layer `layer` of `cache`.
  virtual Tensor forward(Backend& backend, const Tensor& x, KvCache& cache, int layer,
                         const StepContext& step) const = 0;
};

class FeedForwardBlock {
 public:
  virtual ~FeedForwardBlock() = default;
  // x [T, hidden] (normalized block input) -> [T, hidden]. `step` gives MoE routers the token ids (hash routing).
  virtual Tensor forward(Backend& backend, const Tensor& x, const StepContext& step) const = 0;
};

}  // namespace tern
