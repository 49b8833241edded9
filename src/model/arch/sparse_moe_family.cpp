#include "model/arch/sparse_moe_family.h"

#include <algorithm>
#include <optional>

#include "core/error.h"
#include "model/layers/attention.h"
#include "model/layers/gated_mlp.h"
#include "model/layers/rope_table.h"
#include "model/layers/sparse_moe.h"

namespace tern {

namespace {

enum class Family { mixtral, qwen3_moe, gpt_oss };

Family family_of(const ModelConfig& config) {
  if (config.architecture == "MixtralForCausalLM") return Family::mixtral;
  if (config.architecture == "Qwen3MoeForCausalLM") return Family::qwen3_moe;
  if (config.architecture == "GptOssForCausalLM") return Family::gpt_oss;
  fail("{}: not a sparse MoE family architecture", config.architecture);
}

int64_t int_field(const ModelConfig& config, std::initializer_list<const char*> keys) {
  for (const char* key : keys) {
    auto it = config.raw.find(key);
    if (it != config.raw.end() && it->is_number_integer()) return it->get<int64_t>();
  }
  fail("{}: config.json lacks '{}'", config.architecture, *keys.begin());
}

struct DecoderLayer {
  Tensor input_norm;
  std::optional<GqaAttention> attention;
  Tensor post_attention_norm;
  std::optional<SparseMoe> moe;
  std::optional<GatedMlp> dense_mlp;  // Qwen3-MoE layers listed in mlp_only_layers
};

class SparseMoeFamilyModel final : public Model {
 public:
  SparseMoeFamilyModel(const ModelConfig& config, const Checkpoint& checkpoint, Backend& backend)
      : config_(config), backend_(backend), rope_(make_rope_table(backend, config.rope, config.head_dim,
                                                                  config.max_position_embeddings)) {
    const Family family = family_of(config);
    if (family != Family::gpt_oss && config.hidden_act != "silu") {
      fail("{}: unsupported hidden_act '{}'", config.architecture, config.hidden_act);
    }
    WeightLoader weights(checkpoint, backend);
    const int64_t hidden = config.hidden_size;
    const auto& raw = config.raw;

    AttentionConfig attention;
    attention.hidden_size = hidden;
    attention.num_heads = config.num_heads;
    attention.num_kv_heads = config.num_kv_heads;
    attention.head_dim = config.head_dim;
    attention.qkv_bias = config.attention_bias;
    attention.output_bias = config.attention_bias;
    attention.qk_norm = family == Family::qwen3_moe;
    attention.norm_eps = static_cast<float>(config.rms_norm_eps);
    attention.sinks = family == Family::gpt_oss;
    const int64_t window = raw.contains("sliding_window") && raw["sliding_window"].is_number_integer()
                               ? raw["sliding_window"].get<int64_t>()
                               : 0;
    std::vector<std::string> layer_types(config.num_layers, "full_attention");
    if (auto it = raw.find("layer_types"); it != raw.end() && it->is_array()) {
      layer_types = it->get<std::vector<std::string>>();
      if (static_cast<int64_t>(layer_types.size()) != config.num_layers) {
        fail("{}: layer_types has {} entries for {} layers", config.architecture, layer_types.size(), config.num_layers);
      }
    } else if (window > 0 && (family == Family::mixtral || raw.value("use_sliding_window", false))) {
      std::fill(layer_types.begin(), layer_types.end(), "sliding_attention");
    }

    SparseMoeConfig moe;
    moe.hidden_size = hidden;
    moe.router.hidden_size = hidden;
    moe.router.num_experts = int_field(config, {"num_local_experts", "num_experts"});
    moe.router.params.scoring = RouterScoring::softmax;
    moe.router.params.top_k = int_field(config, {"num_experts_per_tok"});
    std::string moe_prefix = "mlp";
    std::vector<bool> dense_layers(config.num_layers, false);
    switch (family) {
      case Family::mixtral:
        moe_prefix = "block_sparse_moe";
        moe.intermediate_size = config.intermediate_size;
        moe.expert_names = {"w1", "w3", "w2"};
        moe.router.params.normalize = true;
        break;
      case Family::qwen3_moe: {
        moe.intermediate_size = int_field(config, {"moe_intermediate_size"});
        moe.router.params.normalize = raw.value("norm_topk_prob", false);
        const int64_t sparse_step = raw.value("decoder_sparse_step", 1);
        const auto mlp_only = raw.value("mlp_only_layers", std::vector<int64_t>{});
        for (int64_t i = 0; i < config.num_layers; ++i) {
          const bool listed = std::find(mlp_only.begin(), mlp_only.end(), i) != mlp_only.end();
          dense_layers[i] = listed || sparse_step <= 0 || (i + 1) % sparse_step != 0;
        }
        break;
      }
      case Family::gpt_oss:
        moe.intermediate_size = config.intermediate_size;
        moe.router_name = "router";
        moe.router.logit_bias = true;
        // Softmax over the top-k logits equals the full softmax renormalized over the chosen experts.
        moe.router.params.normalize = true;
        moe.layout = ExpertLayout::gpt_oss_fused;
        moe.activation.kind = GluActivation::Kind::gpt_oss;
        moe.activation.limit = static_cast<float>(raw.value("swiglu_limit", 7.0));
        moe.activation.alpha = 1.702f;
        break;
    }

    embed_tokens_ = weights.load("model.embed_tokens.weight", {config.vocab_size, hidden});
    for (int64_t i = 0; i < config.num_layers; ++i) {
      const std::string prefix = "model.layers." + std::to_string(i);
      DecoderLayer& layer = layers_.emplace_back();
      layer.input_norm = weights.load(prefix + ".input_layernorm.weight", {hidden});
      AttentionConfig layer_attention = attention;
      if (layer_types[i] == "sliding_attention") {
        if (window <= 0) fail("{}: layer {} is sliding_attention but sliding_window is unset", config.architecture, i);
        layer_attention.sliding_window = window;
      } else if (layer_types[i] != "full_attention") {
        fail("{}: unsupported layer type '{}' at layer {}", config.architecture, layer_types[i], i);
      }
      layer.attention.emplace(weights, prefix + ".self_attn", layer_attention, rope_);
      layer.post_attention_norm = weights.load(prefix + ".post_attention_layernorm.weight", {hidden});
      if (dense_layers[i]) {
        layer.dense_mlp.emplace(weights, prefix + ".mlp", hidden, config.intermediate_size);
      } else {
        layer.moe.emplace(weights, prefix + "." + moe_prefix, moe);
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
  RopeTable rope_;
  Tensor embed_tokens_;  // [vocab, hidden]
  std::vector<DecoderLayer> layers_;
  Tensor final_norm_;
  std::optional<Tensor> lm_head_;  // [vocab, hidden]; absent when tied to embed_tokens_
};

}  // namespace

std::unique_ptr<Model> make_sparse_moe_family_model(const ModelConfig& config, const Checkpoint& checkpoint,
                                                    Backend& backend) {
  return std::make_unique<SparseMoeFamilyModel>(config, checkpoint, backend);
}

}  // namespace tern
