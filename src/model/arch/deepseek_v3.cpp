#include "model/arch/deepseek_v3.h"

#include <cmath>

#include "core/error.h"
#include "model/layers/decoder_stack.h"
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

}  // namespace

DecoderLayerBuilder deepseek_v3_layer_builder(const ModelConfig& config, Backend& backend) {
  if (config.hidden_act != "silu") fail("{}: unsupported hidden_act '{}'", config.architecture, config.hidden_act);
  const auto& raw = config.raw;
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
  RopeTable rope = make_rope_table(backend, config.rope, mla.qk_rope_head_dim, config.max_position_embeddings);
  rope.interleaved = raw.value("rope_interleave", true);

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
  const int64_t intermediate = config.intermediate_size;

  return [=](WeightLoader& weights, int64_t i, const std::string& prefix, DecoderLayer& layer) {
    layer.attention = std::make_unique<MlaAttention>(weights, prefix + ".self_attn", mla, rope);
    if (i < first_dense) {
      layer.feed_forward = std::make_unique<GatedMlp>(weights, prefix + ".mlp", hidden, intermediate);
    } else {
      layer.feed_forward = std::make_unique<SparseMoe>(weights, prefix + ".mlp", moe);
    }
  };
}

std::unique_ptr<Model> make_deepseek_v3_model(const ModelConfig& config, const Checkpoint& checkpoint,
                                              Backend& backend) {
  return std::make_unique<DecoderModel>(config, checkpoint, backend, deepseek_v3_layer_builder(config, backend));
}

}  // namespace tern
