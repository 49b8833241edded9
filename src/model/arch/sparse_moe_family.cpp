#include "model/arch/sparse_moe_family.h"

#include <algorithm>

#include "core/error.h"
#include "model/layers/attention.h"
#include "model/layers/decoder_stack.h"
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

}  // namespace

std::unique_ptr<Model> make_sparse_moe_family_model(const ModelConfig& config, const Checkpoint& checkpoint,
                                                    Backend& backend) {
  const Family family = family_of(config);
  if (family != Family::gpt_oss && config.hidden_act != "silu") {
    fail("{}: unsupported hidden_act '{}'", config.architecture, config.hidden_act);
  }
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

  const RopeTable rope = make_rope_table(backend, config.rope, config.head_dim, config.max_position_embeddings);
  return std::make_unique<DecoderModel>(
      config, checkpoint, backend, [&](WeightLoader& weights, int64_t i, const std::string& prefix, DecoderLayer& layer) {
        AttentionConfig layer_attention = attention;
        if (layer_types[i] == "sliding_attention") {
          if (window <= 0) fail("{}: layer {} is sliding_attention but sliding_window is unset", config.architecture, i);
          layer_attention.sliding_window = window;
        } else if (layer_types[i] != "full_attention") {
          fail("{}: unsupported layer type '{}' at layer {}", config.architecture, layer_types[i], i);
        }
        layer.attention = std::make_unique<GqaAttention>(weights, prefix + ".self_attn", layer_attention, rope);
        if (dense_layers[i]) {
          layer.feed_forward = std::make_unique<GatedMlp>(weights, prefix + ".mlp", hidden, config.intermediate_size);
        } else {
          layer.feed_forward = std::make_unique<SparseMoe>(weights, prefix + "." + moe_prefix, moe);
        }
      });
}

}  // namespace tern
