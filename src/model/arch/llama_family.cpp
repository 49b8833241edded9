#include "model/arch/llama_family.h"

#include "core/error.h"
#include "model/layers/attention.h"
#include "model/layers/decoder_stack.h"
#include "model/layers/gated_mlp.h"
#include "model/layers/rope_table.h"

namespace tern {

std::unique_ptr<Model> make_llama_family_model(const ModelConfig& config, const Checkpoint& checkpoint,
                                               Backend& backend) {
  if (config.hidden_act != "silu") fail("{}: unsupported hidden_act '{}'", config.architecture, config.hidden_act);
  AttentionConfig attention;
  attention.hidden_size = config.hidden_size;
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
  const RopeTable rope = make_rope_table(backend, config.rope, config.head_dim, config.max_position_embeddings);
  return std::make_unique<DecoderModel>(
      config, checkpoint, backend, [&](WeightLoader& weights, int64_t, const std::string& prefix, DecoderLayer& layer) {
        layer.attention = std::make_unique<GqaAttention>(weights, prefix + ".self_attn", attention, rope);
        layer.feed_forward =
            std::make_unique<GatedMlp>(weights, prefix + ".mlp", config.hidden_size, config.intermediate_size);
      });
}

}  // namespace tern
