#pragma once
// DeepSeek's Multi-head Latent Attention. Keys and values of all heads come from one compressed latent per token
// (kv_lora_rank dims) plus one shared rotary key (qk_rope_head_dim dims); the cache keeps only those, and attention
// runs in the latent space with the key and value up-projections absorbed into the query and the output:
//   score_h = (W_UK_h^T q_nope_h) . latent + q_rope_h . k_rope,   out_h = W_UV_h (sum_j p_hj latent_j)
// which is exactly the expanded form's result, for prefill and decode alike.
// Its weights are replicated on tensor-parallel ranks; under decode context parallelism each rank caches its share of
// the latents (cached_attention.h), the case DCP is for: the latent is one "head" that tensor parallelism cannot split.
#include <optional>
#include <string>

#include "backend/backend.h"
#include "model/layers/decoder_block.h"
#include "model/weight_loader.h"

namespace tern {

struct MlaConfig {
  int64_t hidden_size = 0;
  int64_t num_heads = 0;
  int64_t q_lora_rank = 0;  // 0: queries come from one q_proj
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_head_dim = 0;
  int64_t qk_rope_head_dim = 0;
  int64_t v_head_dim = 0;
  float norm_eps = 1e-6f;
  float softmax_scale = 1.0f;
};

class MlaAttention final : public AttentionBlock {
 public:
  // Loads `<prefix>.q_a_proj`, `q_a_layernorm`, `q_b_proj` (or `q_proj`), `kv_a_proj_with_mqa`, `kv_a_layernorm`,
  // `kv_b_proj`, `o_proj`.
  MlaAttention(WeightLoader& weights, const std::string& prefix, const MlaConfig& config, const RopeTable& rope);

  // One latent "head" per token: kv_lora_rank latent dims followed by the rotary key.
  KvLayerSpec kv_spec() const override {
    KvLayerSpec spec{1, config_.kv_lora_rank + config_.qk_rope_head_dim, 0};
    spec.kind = KvLayerKind::mla_latent;
    return spec;
  }
  // x [T, hidden] -> [T, hidden]; writes the tokens' latents into layer `layer` of the cache.
  Tensor forward(Backend& backend, const BlockInput& input, KvCache& cache, int layer,
                 const StepContext& step) const override;

 private:
  MlaConfig config_;
  RopeTable rope_;
  std::optional<Tensor> q_a_weight_;  // [q_lora_rank, hidden]
  std::optional<Tensor> q_a_norm_;    // [q_lora_rank]
  Tensor q_b_weight_;                 // [heads * (nope + rope), q_lora_rank or hidden]
  Tensor kv_a_weight_;                // [kv_lora_rank + rope, hidden]
  Tensor kv_a_norm_;                  // [kv_lora_rank]
  Tensor absorbed_key_;               // [heads, kv_lora_rank, nope]: W_UK_h transposed
  Tensor value_up_;                   // [heads, v_head_dim, kv_lora_rank]: W_UV_h
  Tensor output_weight_;              // [hidden, heads * v_head_dim]
};

}  // namespace tern
