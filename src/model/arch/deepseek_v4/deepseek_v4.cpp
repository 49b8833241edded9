#include "model/arch/deepseek_v4/deepseek_v4.h"

#include <optional>

#include "core/error.h"
#include "model/arch/deepseek_v4/hyper_connection.h"
#include "model/arch/deepseek_v4/v4_attention.h"
#include "model/arch/deepseek_v4/v4_checkpoint_names.h"
#include "model/arch/deepseek_v4/v4_config.h"
#include "model/layers/decoder_stack.h"
#include "model/layers/rope_table.h"
#include "model/layers/sparse_moe.h"

namespace tern {

namespace {

// V4's rope: interleaved pairs on the trailing dims of each head.
RopeTable v4_rope_table(Backend& backend, const RopeConfig& rope, const ModelConfig& config) {
  RopeTable table = make_rope_table(backend, rope, config.head_dim, config.max_position_embeddings);
  table.interleaved = true;
  table.rotate_last_dims = true;
  return table;
}

// The mHC mixes around a layer's two blocks.
struct LayerHyperConnections {
  HyperConnection attention;
  HyperConnection feed_forward;
};

class DeepseekV4Model final : public Model {
 public:
  DeepseekV4Model(const ModelConfig& config, const Checkpoint& checkpoint, Backend& backend)
      : config_(config), v4_(read_deepseek_v4_config(config)), backend_(backend) {
    if (config.hidden_act != "silu") fail("{}: unsupported hidden_act '{}'", config.architecture, config.hidden_act);
    WeightLoader weights(checkpoint, backend);
    const V4CheckpointNames checkpoint_names = v4_checkpoint_names(checkpoint);
    const int64_t hidden = config.hidden_size;
    const float eps = static_cast<float>(config.rms_norm_eps);
    HyperMixParams hc;
    hc.num_streams = v4_.hc_mult;
    hc.sinkhorn_iters = v4_.hc_sinkhorn_iters;
    hc.eps = v4_.hc_eps;
    // Sliding-only layers rotate with the main rope; compressed layers, their compressors and indexers with the
    // compress rope.
    const RopeTable main_rope = v4_rope_table(backend, v4_.main_rope, config);
    const RopeTable compress_rope = v4_rope_table(backend, v4_.compress_rope, config);

    SparseMoeConfig moe;
    moe.hidden_size = hidden;
    moe.intermediate_size = v4_.moe_intermediate_size;
    moe.expert_names = {"w1", "w3", "w2"};
    moe.activation.limit = v4_.swiglu_limit;
    moe.shared_intermediate_size = v4_.moe_intermediate_size * v4_.num_shared_experts;
    moe.router.hidden_size = hidden;
    moe.router.num_experts = v4_.num_experts;
    moe.router.vocab_size = config.vocab_size;
    moe.router.params.scoring = RouterScoring::sqrt_softplus;
    moe.router.params.top_k = v4_.num_experts_per_token;
    moe.router.params.normalize = true;  // V4's routers always renormalize the chosen weights
    moe.router.params.routed_scaling = v4_.routed_scaling;

    DecoderWeightNames names;
    names.embed_tokens = checkpoint_names.embed_tokens;
    names.layers = checkpoint_names.layers;
    names.final_norm = checkpoint_names.final_norm;
    names.attention_norm = "attn_norm";
    names.feed_forward_norm = "ffn_norm";
    names.lm_head = checkpoint_names.lm_head;
    stack_.emplace(
        config, weights,
        [&](WeightLoader& layer_weights, int64_t i, const std::string& prefix, DecoderLayer& layer) {
          hyper_.push_back({HyperConnection(layer_weights, prefix + ".hc_attn_fn", prefix + ".hc_attn_base",
                                            prefix + ".hc_attn_scale", hidden, hc, false, eps),
                            HyperConnection(layer_weights, prefix + ".hc_ffn_fn", prefix + ".hc_ffn_base",
                                            prefix + ".hc_ffn_scale", hidden, hc, false, eps)});
          const V4AttentionKind kind = v4_.attention_kinds[i];
          layer.attention = std::make_unique<V4Attention>(layer_weights, prefix + ".attn", config, v4_, kind,
                                                          kind == V4AttentionKind::sliding ? main_rope : compress_rope,
                                                          checkpoint_names.kv_norm);
          SparseMoeConfig layer_moe = moe;
          layer_moe.router.hash_table = v4_.hash_moe[i];
          if (!v4_.hash_moe[i]) layer_moe.router.selection_bias_name = "bias";
          layer.feed_forward = std::make_unique<SparseMoe>(layer_weights, prefix + ".ffn", layer_moe);
        },
        names);
    head_hc_.emplace(weights, checkpoint_names.hc_head_fn, checkpoint_names.hc_head_base,
                     checkpoint_names.hc_head_scale, hidden, hc, true, eps);
  }

  const ModelConfig& config() const override { return config_; }
  std::vector<KvLayerSpec> kv_layers() const override { return stack_->kv_layers(); }
  std::vector<SparseMoe*> expert_layers() override { return stack_->expert_layers(); }

  // The decoder shell with mHC streams in place of the residual sum: every block reads a collapse of the streams
  // and its output is expanded back into them.
  Tensor forward(const StepContext& step, KvCache& cache) override {
    const float eps = static_cast<float>(config_.rms_norm_eps);
    const int64_t num_tokens = step.batch().num_tokens();
    const int64_t hidden = config_.hidden_size;
    const Tensor embedded = stack_->embed(backend_, step);
    Tensor streams = embedded;  // every stream starts as the token's embedding
    for (int64_t s = 1; s < v4_.hc_mult; ++s) streams = backend_.concat_columns(streams, embedded);
    streams = streams.reshape({num_tokens, v4_.hc_mult, hidden});
    const auto& layers = stack_->layers();
    for (size_t i = 0; i < layers.size(); ++i) {
      const DecoderLayer& layer = layers[i];
      Tensor mix = hyper_[i].attention.mix(backend_, streams);
      Tensor collapsed = backend_.hyper_collapse(streams, mix);
      const Tensor attended = layer.attention->forward(
          backend_, BlockInput(backend_, collapsed, std::nullopt, layer.attention_norm, eps), cache, static_cast<int>(i),
          step);
      streams = backend_.hyper_expand(streams, attended, mix);
      mix = hyper_[i].feed_forward.mix(backend_, streams);
      collapsed = backend_.hyper_collapse(streams, mix);
      const Tensor fed =
          layer.feed_forward->forward(backend_, BlockInput(backend_, collapsed, std::nullopt, layer.feed_forward_norm, eps), step);
      streams = backend_.hyper_expand(streams, fed, mix);
    }
    const Tensor gathered = backend_.gather_logit_rows(streams.reshape({num_tokens, v4_.hc_mult * hidden}), step);
    const Tensor rows = gathered.reshape({gathered.size(0), v4_.hc_mult, hidden});
    return stack_->final_norm_logits(backend_, backend_.hyper_collapse(rows, head_hc_->mix(backend_, rows)));
  }

 private:
  ModelConfig config_;
  DeepseekV4Config v4_;
  Backend& backend_;
  std::optional<DecoderStack> stack_;
  std::vector<LayerHyperConnections> hyper_;  // per layer
  std::optional<HyperConnection> head_hc_;
};

}  // namespace

std::unique_ptr<Model> make_deepseek_v4_model(const ModelConfig& config, const Checkpoint& checkpoint,
                                              Backend& backend) {
  return std::make_unique<DeepseekV4Model>(config, checkpoint, backend);
}

}  // namespace tern
