#pragma once
// Grouped-query self-attention with rotary positions over the paged KV cache: fused q/k/v projection (optional
// bias), optional per-head q/k RMSNorm (Qwen3), optional sliding window and sinks (gpt-oss), output projection.
#include <optional>
#include <string>

#include "backend/backend.h"
#include "model/layers/decoder_block.h"
#include "model/weight_loader.h"

namespace tern {

struct AttentionConfig {
  int64_t hidden_size = 0;
  // The q/k/v projections' input width where it is not hidden_size (EAGLE-3's layer reads the embedding and the
  // hidden state side by side: 2 * hidden); 0: hidden_size.
  int64_t input_size = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  bool qkv_bias = false;
  bool output_bias = false;
  bool qk_norm = false;
  float norm_eps = 1e-6f;
  int64_t sliding_window = 0;
  bool sinks = false;
};

class GqaAttention final : public AttentionBlock {
 public:
  // Loads `<prefix>.q_proj`, `k_proj`, `v_proj`, `o_proj` (and `q_norm`, `k_norm`, `sinks` when configured, and
  // `k_scale`, `v_scale` where the checkpoint has them): this rank's heads under tensor parallelism, all of them
  // under decode context parallelism (which sinks and sliding windows refuse by name).
  GqaAttention(WeightLoader& weights, const std::string& prefix, const AttentionConfig& config, const RopeTable& rope);

  KvLayerSpec kv_spec() const override {
    KvLayerSpec spec{config_.num_kv_heads, config_.head_dim, config_.head_dim};
    if (config_.sliding_window > 0) {
      spec.kind = KvLayerKind::sliding_window;
      spec.sliding_window_tokens = config_.sliding_window;
    }
    spec.key_scale = key_scale_;
    spec.value_scale = value_scale_;
    return spec;
  }
  // x [T, input_size or hidden] -> [T, hidden]; writes the tokens' keys and values into layer `layer` of the cache.
  Tensor forward(Backend& backend, const BlockInput& input, KvCache& cache, int layer,
                 const StepContext& step) const override;

 private:
  AttentionConfig config_;  // heads of this tensor-parallel rank (all heads under decode context parallelism)
  RopeTable rope_;
  bool context_parallel_ = false;  // the cache holds this rank's share of the tokens; weights are whole
  Tensor qkv_weight_;  // [(heads + 2 * kv_heads) * head_dim, input_size or hidden]
  std::optional<Tensor> qkv_bias_;
  Tensor output_weight_;  // [hidden, heads * head_dim]
  std::optional<Tensor> output_bias_;
  std::optional<Tensor> q_norm_, k_norm_;  // [head_dim]
  std::optional<Tensor> sinks_;            // [heads]
  // An FP8 KV cache's per-tensor scales where the checkpoint calibrated them (vLLM's `self_attn.k_scale`,
  // `v_scale`), else 1.
  float key_scale_ = 1.0f;
  float value_scale_ = 1.0f;
};

}  // namespace tern
