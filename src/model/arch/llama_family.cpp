#include "model/arch/llama_family.h"

#include <optional>

#include "core/error.h"
#include "model/layers/attention.h"
#include "model/layers/gated_mlp.h"
#include "model/layers/rope_table.h"

namespace tern {

namespace {

struct DecoderLayer {
  Tensor input_norm;
  std::optional<GqaAttention> attention;
  Tensor post_attention_norm;
  std::optional<GatedMlp> mlp;
};

class LlamaFamilyModel final : public Model {
 public:
  LlamaFamilyModel(const ModelConfig& config, const Checkpoint& checkpoint, Backend& backend)
      : config_(config), backend_(backend), rope_(make_rope_table(backend, config.rope, config.head_dim,
                                                                  config.max_position_embeddings)) {
    if (config.hidden_act != "silu") fail("{}: unsupported hidden_act '{}'", config.architecture, config.hidden_act);
    WeightLoader weights(checkpoint, backend);
    const int64_t hidden = config.hidden_size;
    AttentionConfig attention;
    attention.hidden_size = hidden;
    attention.num_heads = config.num_heads;
    attention.num_kv_heads = config.num_kv_heads;
    attention.head_dim = config.head_dim;
    attention.qkv_bias = config.attention_bias || config.architecture == "Qwen2ForCausalLM";
    attention.output_bias = config.attention_bias && config.architecture != "Qwen2ForCausalLM";
    attention.qk_norm = config.architecture == "Qwen3ForCausalLM";
    attention.norm_eps = static_cast<float>(config.rms_norm_eps);
    if (config.raw.value("use_sliding_window", false) || config.model_type == "mistral") {
      const auto window = config.raw.find("sliding_window");
      if (window != config.raw.end() && window->is_number_integer()) attention.sliding_window = *window;
    }
    embed_tokens_ = weights.load("model.embed_tokens.weight", {config.vocab_size, hidden});
    for (int64_t i = 0; i < config.num_layers; ++i) {
      const std::string prefix = "model.layers." + std::to_string(i);
      DecoderLayer& layer = layers_.emplace_back();
      layer.input_norm = weights.load(prefix + ".input_layernorm.weight", {hidden});
      layer.attention.emplace(weights, prefix + ".self_attn", attention, rope_);
      layer.post_attention_norm = weights.load(prefix + ".post_attention_layernorm.weight", {hidden});
      layer.mlp.emplace(weights, prefix + ".mlp", hidden, config.intermediate_size);
    }
    final_norm_ = weights.load("model.norm.weight", {hidden});
    if (!config.tie_word_embeddings) lm_head_ = weights.load("lm_head.weight", {config.vocab_size, hidden});
  }

  const ModelConfig& config() const override { return config_; }

  std::vector<KvLayerSpec> kv_layers() const override {
    std::vector<KvLayerSpec> specs;
    for (const auto& layer : layers_) specs.push_back(layer.attention->kv_spec());
    return specs;
  }

  Tensor forward(const StepContext& step, KvCache& cache) override {
    const float eps = static_cast<float>(config_.rms_norm_eps);
    Tensor residual = backend_.embedding(embed_tokens_, step);
    Tensor x = backend_.rms_norm(residual, layers_[0].input_norm, eps);
    for (size_t i = 0; i < layers_.size(); ++i) {
      const DecoderLayer& layer = layers_[i];
      const Tensor attended = layer.attention->forward(backend_, x, cache, static_cast<int>(i), step);
      x = backend_.add_rms_norm(residual, attended, layer.post_attention_norm, eps);
      const Tensor mlp_out = layer.mlp->forward(backend_, x);
      const Tensor& next_norm = i + 1 < layers_.size() ? layers_[i + 1].input_norm : final_norm_;
      x = backend_.add_rms_norm(residual, mlp_out, next_norm, eps);
    }
    const Tensor last = backend_.gather_logit_rows(x, step);
    return backend_.linear(last, lm_head_ ? *lm_head_ : embed_tokens_, nullptr);
  }

 private:
  ModelConfig config_;
  Backend& backend_;
  RopeTable rope_;
  Tensor embed_tokens_;  // [vocab, hidden]
  std::vector<DecoderLayer> layers_;
  Tensor final_norm_;
  std::optional<Tensor> lm_head_;  // [vocab, hidden]; absent when tied to embed_tokens_
};

}  // namespace

std::unique_ptr<Model> make_llama_family_model(const ModelConfig& config, const Checkpoint& checkpoint,
                                               Backend& backend) {
  return std::make_unique<LlamaFamilyModel>(config, checkpoint, backend);
}

}  // namespace tern
