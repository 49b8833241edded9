#include "model/arch/deepseek_v4/deepseek_v4.h"

#include <optional>

#include "core/error.h"
#include "model/arch/deepseek_v4/v4_layer.h"

namespace tern {

namespace {

class DeepseekV4Model final : public Model {
 public:
  DeepseekV4Model(const ModelConfig& config, const Checkpoint& checkpoint, Backend& backend)
      : config_(config), v4_(read_deepseek_v4_config(config)), backend_(backend) {
    if (config.hidden_act != "silu") fail("{}: unsupported hidden_act '{}'", config.architecture, config.hidden_act);
    WeightLoader weights(checkpoint, backend);
    const V4CheckpointNames checkpoint_names = v4_checkpoint_names(checkpoint);
    const V4LayerBuilder builder(config, v4_, backend, checkpoint_names);
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
          hyper_.push_back(builder.build(layer_weights, prefix, v4_.attention_kinds[i], v4_.hash_moe[i], layer));
        },
        names);
    head_hc_.emplace(weights, checkpoint_names.hc_head_fn, checkpoint_names.hc_head_base,
                     checkpoint_names.hc_head_scale, config.hidden_size, builder.hyper_params(), true,
                     static_cast<float>(config.rms_norm_eps));
  }

  const ModelConfig& config() const override { return config_; }
  std::vector<KvLayerSpec> kv_layers() const override { return stack_->kv_layers(); }
  std::vector<SparseMoe*> expert_layers() override { return stack_->expert_layers(); }

  Tensor forward(const StepContext& step, KvCache& cache) override {
    return logits(step, last_layer_streams(step, cache));
  }

  // The MTP block reads the last layer's streams before the head's collapse (deepseek_v4_mtp.h), flattened to
  // [T, hc_mult * hidden].
  Tensor forward_with_hidden_states(const StepContext& step, KvCache& cache, Tensor& hidden_states) override {
    const Tensor streams = last_layer_streams(step, cache);
    hidden_states = streams.reshape({streams.size(0), v4_.hc_mult * config_.hidden_size});
    return logits(step, streams);
  }

 private:
  // The decoder shell with mHC streams in place of the residual sum -> [T, hc_mult, hidden].
  Tensor last_layer_streams(const StepContext& step, KvCache& cache) {
    const float eps = static_cast<float>(config_.rms_norm_eps);
    const int64_t num_tokens = step.batch().num_tokens();
    const Tensor embedded = stack_->embed(backend_, step);
    Tensor streams = embedded;  // every stream starts as the token's embedding
    for (int64_t s = 1; s < v4_.hc_mult; ++s) streams = backend_.concat_columns(streams, embedded);
    streams = streams.reshape({num_tokens, v4_.hc_mult, config_.hidden_size});
    const auto& layers = stack_->layers();
    for (size_t i = 0; i < layers.size(); ++i) {
      streams = v4_layer_forward(backend_, layers[i], hyper_[i], streams, cache, static_cast<int>(i), step, eps);
    }
    return streams;
  }

  // The head's collapse of the streams' logit rows, the final norm and the lm_head -> [R, vocab].
  Tensor logits(const StepContext& step, const Tensor& streams) {
    const int64_t hidden = config_.hidden_size;
    const Tensor gathered =
        backend_.gather_logit_rows(streams.reshape({streams.size(0), v4_.hc_mult * hidden}), step);
    const Tensor rows = gathered.reshape({gathered.size(0), v4_.hc_mult, hidden});
    return stack_->final_norm_logits(backend_, head_hc_->collapse(backend_, rows).collapsed);
  }

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
