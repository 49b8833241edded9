#pragma once
// The two kinds of block a decoder layer holds, as interfaces, so that the decoder shell (decoder_stack.h) is written
// once for every architecture: self-attention over the paged KV cache (GQA, MLA, DeepSeek-V4's) and a
// position-wise feed-forward block (SwiGLU MLP, mixture of experts).
#include "backend/backend.h"
#include "model/layers/block_input.h"

namespace tern {

class AttentionBlock {
 public:
  virtual ~AttentionBlock() = default;
  // What the layer keeps in the KV cache per token.
  virtual KvLayerSpec kv_spec() const = 0;
  // The block input [T, hidden] -> [T, hidden]; writes the step's tokens into layer `layer` of `cache`. Every
  // forward reads its input (BlockInput::linear or normalized), which adds the previous block's output into the
  // residual stream.
  virtual Tensor forward(Backend& backend, const BlockInput& x, KvCache& cache, int layer,
                         const StepContext& step) const = 0;
};

class FeedForwardBlock {
 public:
  virtual ~FeedForwardBlock() = default;
  // The block input [T, hidden] -> [T, hidden], read as AttentionBlock::forward's. `step` gives MoE routers the
  // token ids (hash routing).
  virtual Tensor forward(Backend& backend, const BlockInput& x, const StepContext& step) const = 0;
};

}  // namespace tern
