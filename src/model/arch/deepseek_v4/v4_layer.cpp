#include "model/arch/deepseek_v4/v4_layer.h"

#include <memory>
#include <optional>

#include "model/arch/deepseek_v4/v4_attention.h"

namespace tern {

namespace {

// V4's rope: interleaved pairs on the trailing dims of each head.
RopeTable v4_rope_table(Backend& backend, const RopeConfig& rope, const ModelConfig& config) {
  RopeTable table = make_rope_table(backend, rope, config.head_dim, config.max_position_embeddings);
  table.interleaved = true;
  table.rotate_last_dims = true;
  return table;
}

}  // namespace

V4LayerBuilder::V4LayerBuilder(const ModelConfig& config, const DeepseekV4Config& v4, Backend& backend,
                               const V4CheckpointNames& names)
    : config_(config),
      v4_(v4),
      kv_norm_(names.kv_norm),
      main_rope_(v4_rope_table(backend, v4.main_rope, config)),
      compress_rope_(v4_rope_table(backend, v4.compress_rope, config)) {
  hyper_.num_streams = v4.hc_mult;
  hyper_.sinkhorn_iters = v4.hc_sinkhorn_iters;
  hyper_.eps = v4.hc_eps;
  moe_.hidden_size = config.hidden_size;
  moe_.intermediate_size = v4.moe_intermediate_size;
  moe_.expert_names = {"w1", "w3", "w2"};
  moe_.activation.limit = v4.swiglu_limit;
  moe_.shared_intermediate_size = v4.moe_intermediate_size * v4.num_shared_experts;
  moe_.router.hidden_size = config.hidden_size;
  moe_.router.num_experts = v4.num_experts;
  moe_.router.vocab_size = config.vocab_size;
  moe_.router.params.scoring = RouterScoring::sqrt_softplus;
  moe_.router.params.top_k = v4.num_experts_per_token;
  moe_.router.params.normalize = true;  // V4's routers always renormalize the chosen weights
  moe_.router.params.routed_scaling = v4.routed_scaling;
}

LayerHyperConnections V4LayerBuilder::build(WeightLoader& weights, const std::string& prefix, V4AttentionKind kind,
                                            bool hash_moe, DecoderLayer& layer) const {
  const int64_t hidden = config_.hidden_size;
  const float eps = static_cast<float>(config_.rms_norm_eps);
  LayerHyperConnections hyper{HyperConnection(weights, prefix + ".hc_attn_fn", prefix + ".hc_attn_base",
                                              prefix + ".hc_attn_scale", hidden, hyper_, false, eps),
                              HyperConnection(weights, prefix + ".hc_ffn_fn", prefix + ".hc_ffn_base",
                                              prefix + ".hc_ffn_scale", hidden, hyper_, false, eps)};
  layer.attention = std::make_unique<V4Attention>(weights, prefix + ".attn", config_, v4_, kind,
                                                  kind == V4AttentionKind::sliding ? main_rope_ : compress_rope_,
                                                  kv_norm_);
  SparseMoeConfig moe = moe_;
  moe.router.hash_table = hash_moe;
  if (!hash_moe) moe.router.selection_bias_name = "bias";
  layer.feed_forward = std::make_unique<SparseMoe>(weights, prefix + ".ffn", moe);
  return hyper;
}

Tensor v4_layer_forward(Backend& backend, const DecoderLayer& layer, const LayerHyperConnections& hyper,
                        const Tensor& streams, KvCache& cache, int kv_layer, const StepContext& step, float norm_eps) {
  HyperMixed before_attention = hyper.attention.collapse(backend, streams);
  const Tensor attended = layer.attention->forward(
      backend, BlockInput(backend, before_attention.collapsed, std::nullopt, layer.attention_norm, norm_eps), cache,
      kv_layer, step);
  const Tensor after_attention = backend.hyper_expand(streams, attended, before_attention.mix);
  HyperMixed before_feed_forward = hyper.feed_forward.collapse(backend, after_attention);
  const Tensor fed = layer.feed_forward->forward(
      backend, BlockInput(backend, before_feed_forward.collapsed, std::nullopt, layer.feed_forward_norm, norm_eps),
      step);
  return backend.hyper_expand(after_attention, fed, before_feed_forward.mix);
}

}  // namespace tern
