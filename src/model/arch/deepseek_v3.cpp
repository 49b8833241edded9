#include "model/arch/deepseek_v3.h"

#include <cmath>
#include <optional>

#include "core/error.h"
#include "model/layers/gated_mlp.h"
#include "model/layers/mla_attention.h"
#include "model/layers/rope_table.h"
#include "model/layers/sparse_moe.h"

namespace tern {

namespace {

int64_t required_int(const ModelConfig& config, const char* key) {
  auto it = config.raw.find(key);
  if (it == config.raw.end() || !it->is_number_integer()) fail("{}: config.json lacks '{}'", config.architecture, key);
  return it->get<int64_t>();
}

// DeepSeek's yarn multiplies the softmax scale by mscale(factor, mscale_all_dim)^2.
float softmax_scale(const ModelConfig& config, int64_t qk_head_dim) {
  float scale = 1.0f / std::sqrt(static_cast<float>(qk_head_dim));
  if (config.rope.type != "default" && config.rope.mscale_all_dim != 0.0 && config.rope.factor > 1.0) {
    const double mscale = 0.1 * config.rope.mscale_all_dim * std::log(config.rope.factor) + 1.0;
    scale = static_cast<float>(scale * mscale * mscale);
  }
  return scale;
}

struct DecoderLayer {
  Tensor input_norm;
  std::optional<MlaAttention> attention;
  Tensor post_attention_norm;
  std::optional<GatedMlp> dense_mlp;
  std::optional<SparseMoe> moe;
};

class DeepseekV3Model final : public Model {
 public:
  DeepseekV3Model(const ModelConfig& config, const Checkpoint& checkpoint, Backend& backend)
      : config_(config), backend_(backend) {
    if (config.hidden_act != "silu") fail("{}: unsupported hidden_act '{}'", config.architecture, config.hidden_act);
    const auto& raw = config.raw;
    WeightLoader weights(checkpoint, backend);
    const int64_t hidden = config.hidden_size;

    MlaConfig mla;
    mla.hidden_size = hidden;
    mla.num_heads = config.num_heads;
    mla.q_lora_rank = raw.value("q_lora_rank", nlohmann::json()).is_number_integer() ? raw["q_lora_rank"].get<int64_t>() : 0;
    mla.kv_lora_rank = required_int(config, "kv_lora_rank");
    mla.qk_nope_head_dim = required_int(config, "qk_nope_head_dim");
    mla.qk_rope_head_dim = required_int(config, "qk_rope_head_dim");
    mla.v_head_dim = required_int(config, "v_head_dim");
    mla.norm_eps = static_cast<float>(config.rms_norm_eps);
    mla.softmax_scale = softmax_scale(config, mla.qk_nope_head_dim + mla.qk_rope_head_dim);
    rope_ = make_rope_table(backend, config.rope, mla.qk_rope_head_dim, config.max_position_embeddings);
    rope_.interleaved = raw.value("rope_interleave", true);

    SparseMoeConfig moe;
    moe.hidden_size = hidden;
    moe.intermediate_size = required_int(config, "moe_intermediate_size");
    moe.router.hidden_size = hidden;
    moe.router.num_experts = required_int(config, "n_routed_experts");
    moe.router.selection_bias_name = "e_score_correction_bias";
    moe.router.params.scoring = RouterScoring::sigmoid;
    moe.router.params.top_k = required_int(config, "num_experts_per_tok");
    moe.router.params.normalize = raw.value("norm_topk_prob", true);
    moe.router.params.routed_scaling = static_cast<float>(raw.value("routed_scaling_factor", 1.0));
    moe.router.params.num_groups = raw.value("n_group", 1);
    moe.router.params.top_k_groups = raw.value("topk_group", 1);
    moe.shared_intermediate_size = moe.intermediate_size * raw.value("n_shared_experts", 0);
    const int64_t first_dense = raw.value("first_k_dense_replace", 0);

    embed_tokens_ = weights.load("model.embed_tokens.weight", {config.vocab_size, hidden});
    for (int64_t i = 0; i < config.num_layers; ++i) {
      const std::string prefix = "model.layers." + std::to_string(i);
      DecoderLayer& layer = layers_.emplace_back();
      layer.input_norm = weights.load(prefix + ".input_layernorm.weight", {hidden});
      layer.attention.emplace(weights, prefix + ".self_attn", mla, rope_);
      layer.post_attention_norm = weights.load(prefix + ".post_attention_layernorm.weight", {hidden});
      if (i < first_dense) {
        layer.dense_mlp.emplace(weights, prefix + ".mlp", hidden, config.intermediate_size);
      } else {
        layer.moe.emplace(weights, prefix + ".mlp", moe);
      }
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
      const Tensor mlp_out = layer.moe ? layer.moe->forward(backend_, x, step) : layer.dense_mlp->forward(backend_, x);
      const Tensor& next_norm = i + 1 < layers_.size() ? layers_[i + 1].input_norm : final_norm_;
      x = backend_.add_rms_norm(residual, mlp_out, next_norm, eps);
    }
    const Tensor last = backend_.gather_logit_rows(x, step);
    return backend_.linear(last, lm_head_ ? *lm_head_ : embed_tokens_, nullptr);
  }

 private:
  ModelConfig config_;
  Backend& backend_;
  RopeTable rope_;  // interleaved pairs over qk_rope_head_dim; the attention layers hold a reference to it
  Tensor embed_tokens_;
  std::vector<DecoderLayer> layers_;
  Tensor final_norm_;
  std::optional<Tensor> lm_head_;
};

}  // namespace

std::unique_ptr<Model> make_deepseek_v3_model(const ModelConfig& config, const Checkpoint& checkpoint,
                                              Backend& backend) {
  return std::make_unique<DeepseekV3Model>(config, checkpoint, backend);
}

}  // namespace tern
