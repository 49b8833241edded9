#pragma once
// One DeepSeek-V4 layer (inference/model.py's Block): the attention and MoE blocks, each between the mHC mixes of
// the residual streams. The decoder's layers and the MTP block (deepseek_v4_mtp.h, a Block too) are built and run
// by these.
#include <string>

#include "model/arch/deepseek_v4/hyper_connection.h"
#include "model/arch/deepseek_v4/v4_checkpoint_names.h"
#include "model/arch/deepseek_v4/v4_config.h"
#include "model/layers/decoder_stack.h"
#include "model/layers/rope_table.h"
#include "model/layers/sparse_moe.h"

namespace tern {

// The mHC mixes around a layer's two blocks.
struct LayerHyperConnections {
  HyperConnection attention;
  HyperConnection feed_forward;
};

class V4LayerBuilder {
 public:
  V4LayerBuilder(const ModelConfig& config, const DeepseekV4Config& v4, Backend& backend,
                 const V4CheckpointNames& names);

  const HyperMixParams& hyper_params() const { return hyper_; }
  // Fills `layer`'s blocks from the tensors under `prefix` (its norms are the caller's) and returns its mHC mixes.
  LayerHyperConnections build(WeightLoader& weights, const std::string& prefix, V4AttentionKind kind, bool hash_moe,
                              DecoderLayer& layer) const;

 private:
  const ModelConfig& config_;
  const DeepseekV4Config& v4_;
  std::string kv_norm_;
  HyperMixParams hyper_;
  // Sliding-only layers rotate with the main rope; compressed layers, their compressors and indexers with the
  // compress rope.
  RopeTable main_rope_;
  RopeTable compress_rope_;
  SparseMoeConfig moe_;
};

// streams [T, N, hidden] through `layer` (its attention's KV in `cache` layer `kv_layer`) -> [T, N, hidden]: every
// block reads a collapse of the streams, and its output is expanded back into them.
Tensor v4_layer_forward(Backend& backend, const DecoderLayer& layer, const LayerHyperConnections& hyper,
                        const Tensor& streams, KvCache& cache, int kv_layer, const StepContext& step, float norm_eps);

}  // namespace tern
