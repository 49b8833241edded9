#include "model/arch/llama_eagle3.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "model/layers/block_input.h"
#include "model/layers/rope_table.h"
#include "model/weight_loader.h"

namespace tern {

namespace {

// The architectures a head's config.json may name (SGLang's and the published checkpoints'; vLLM's registry takes
// both).
bool is_eagle3_architecture(const std::string& architecture) {
  return architecture == "LlamaForCausalLMEagle3" || architecture == "Eagle3LlamaForCausalLM";
}

// The head's config.json entries tern does not run, refused by name rather than read wrong.
void refuse_variants(const ModelConfig& config, const std::string& origin) {
  if (config.num_layers != 1) {
    fail("{}: EAGLE-3 heads of one decoder layer run (the published ones); this one has num_hidden_layers {}", origin,
         config.num_layers);
  }
  if (config.hidden_act != "silu") fail("{}: unsupported hidden_act '{}'", origin, config.hidden_act);
  if (config.attention_bias || config.mlp_bias) fail("{}: EAGLE-3 heads with attention or MLP biases do not run", origin);
  if (config.raw.value("norm_before_residual", false)) {
    fail("{}: norm_before_residual (the residual after hidden_norm) is not supported", origin);
  }
  const auto eagle = config.raw.find("eagle_config");
  if (eagle != config.raw.end() && eagle->is_object() && !eagle->value("use_aux_hidden_state", true)) {
    fail("{}: eagle_config.use_aux_hidden_state false (no fc over the target's layers) is not supported", origin);
  }
}

// d + d2t[d] for each draft id d, from the checkpoint's int64 d2t [draft_vocab]; the identity where the head's
// vocabulary is the target's and it has no d2t.
std::vector<int32_t> draft_to_target(const Checkpoint& checkpoint, int64_t draft_vocab, int64_t vocab,
                                     const std::string& origin) {
  std::vector<int32_t> ids(static_cast<size_t>(draft_vocab));
  if (!checkpoint.has("d2t")) {
    if (draft_vocab != vocab) {
      fail("{}: a draft vocabulary of {} tokens (draft_vocab_size) needs its map to the target's {} (d2t), which the "
           "checkpoint lacks", origin, draft_vocab, vocab);
    }
    for (size_t d = 0; d < ids.size(); ++d) ids[d] = static_cast<int32_t>(d);
    return ids;
  }
  const TensorInfo& d2t = checkpoint.get("d2t");
  if (d2t.dtype != DType::I64 || d2t.shape.size() != 1) {
    fail("{}: d2t must be a 1-D int64 tensor, got {} {}", origin, dtype_name(d2t.dtype), shape_string(d2t.shape));
  }
  if (d2t.shape[0] != draft_vocab) {
    fail("{}: d2t has {} entries and the draft vocabulary {} (draft_vocab_size)", origin, d2t.shape[0], draft_vocab);
  }
  for (int64_t d = 0; d < draft_vocab; ++d) {
    int64_t offset = 0;
    std::memcpy(&offset, d2t.data + d * sizeof(int64_t), sizeof(int64_t));
    const int64_t target = d + offset;
    if (target < 0 || target >= vocab) {
      fail("{}: d2t maps draft id {} to {}, outside the target's vocabulary of {}", origin, d, target, vocab);
    }
    ids[static_cast<size_t>(d)] = static_cast<int32_t>(target);
  }
  return ids;
}

}  // namespace

std::vector<int32_t> eagle3_target_layers(const nlohmann::json& config, int64_t num_target_layers,
                                          const std::string& origin) {
  const char* key = "eagle_aux_hidden_state_layer_ids";
  const nlohmann::json* given = nullptr;
  if (auto it = config.find(key); it != config.end() && !it->is_null()) {
    given = &*it;
  } else if (auto eagle = config.find("eagle_config"); eagle != config.end() && eagle->is_object()) {
    if (auto inner = eagle->find(key); inner != eagle->end() && !inner->is_null()) given = &*inner;
  }
  std::vector<int64_t> layers;
  if (given) {
    if (!given->is_array()) fail("{}: {} must be a list of layer indices, got {}", origin, key, given->dump());
    for (const auto& id : *given) {
      if (!id.is_number_integer()) fail("{}: {} must be a list of layer indices, got {}", origin, key, given->dump());
      layers.push_back(id.get<int64_t>());
    }
  } else {
    layers = {2, num_target_layers / 2, num_target_layers - 3};
  }
  // vLLM appends a layer's input where its index is in the list, so the states go to fc in layer order.
  std::sort(layers.begin(), layers.end());
  const bool distinct = std::adjacent_find(layers.begin(), layers.end()) == layers.end();
  if (layers.size() != 3 || !distinct || layers.front() < 0 || layers.back() > num_target_layers) {
    std::string listed;
    for (int64_t layer : layers) listed += (listed.empty() ? "" : ", ") + std::to_string(layer);
    fail("{}: an EAGLE-3 head reads the inputs of three distinct target layers in [0, {}]; {} ({}) for a target of "
         "{} layers{}", origin, num_target_layers, given ? key : "the default (2, L/2, L-3)", listed,
         num_target_layers, given ? "" : std::string("; config.json may name them (") + key + ")");
  }
  return {layers.begin(), layers.end()};
}

LlamaEagle3Model::LlamaEagle3Model(const ModelConfig& config, const Checkpoint& checkpoint, const Model& target,
                                   Backend& backend, const std::string& origin)
    : config_(config), backend_(backend), norm_eps_(static_cast<float>(config.rms_norm_eps)) {
  refuse_variants(config, origin);
  const ModelConfig& target_config = target.config();
  if (!target.returns_layer_inputs()) {
    fail("{}: the target ({}) does not hand out its layers' inputs, which an EAGLE-3 head reads (targets whose "
         "layers add into one residual stream do: Llama, Qwen, Mixtral, gpt-oss, DeepSeek-V3)", origin,
         target_config.architecture);
  }
  const int64_t hidden = config.hidden_size;
  const int64_t target_hidden = config.raw.value("target_hidden_size", hidden);
  if (hidden != target_config.hidden_size || target_hidden != hidden) {
    fail("{}: the head's hidden size {} (target_hidden_size {}) differs from the target's {}", origin, hidden,
         target_hidden, target_config.hidden_size);
  }
  const int64_t vocab = config.vocab_size;
  if (vocab != target_config.vocab_size) {
    fail("{}: the head's vocabulary of {} tokens (vocab_size) differs from the target's {}", origin, vocab,
         target_config.vocab_size);
  }
  const auto draft_field = config.raw.find("draft_vocab_size");
  const int64_t draft_vocab =
      draft_field != config.raw.end() && draft_field->is_number_integer() ? draft_field->get<int64_t>() : vocab;
  if (draft_vocab < 1 || draft_vocab > vocab) {
    fail("{}: draft_vocab_size {} must be in [1, vocab_size {}]", origin, draft_vocab, vocab);
  }
  target_layers_ = eagle3_target_layers(config.raw, target_config.num_layers, origin);
  draft_to_target_ = draft_to_target(checkpoint, draft_vocab, vocab, origin);

  WeightLoader weights(checkpoint, backend);
  if (checkpoint.has("embed_tokens.weight")) {
    embedding_ = {weights.load("embed_tokens.weight", {vocab, hidden}), {0, vocab}};
  } else if (const auto shared = target.token_embedding()) {
    embedding_ = *shared;
    embeds_with_target_ = true;
  } else {
    fail("{}: the head has no embed_tokens.weight and the target ({}) does not share its embedding", origin,
         target_config.architecture);
  }
  fc_ = weights.linear_weights().load("fc.weight", {hidden, 3 * hidden});
  const std::string layer = "midlayer";
  input_norm_ = weights.load(layer + ".input_layernorm.weight", {hidden});
  hidden_norm_ = weights.load(layer + ".hidden_norm.weight", {hidden});
  post_attention_norm_ = weights.load(layer + ".post_attention_layernorm.weight", {hidden});
  AttentionConfig attention;
  attention.hidden_size = hidden;
  attention.input_size = 2 * hidden;
  attention.num_heads = config.num_heads;
  attention.num_kv_heads = config.num_kv_heads;
  attention.head_dim = config.head_dim;
  attention.norm_eps = norm_eps_;
  const RopeTable rope = make_rope_table(backend, config.rope, config.head_dim, config.max_position_embeddings);
  attention_ = std::make_unique<GqaAttention>(weights, layer + ".self_attn", attention, rope);
  mlp_ = std::make_unique<GatedMlp>(weights, layer + ".mlp", hidden, config.intermediate_size);
  norm_ = weights.load("norm.weight", {hidden});
  lm_head_ = weights.load("lm_head.weight", {draft_vocab, hidden});
}

Tensor LlamaEagle3Model::forward(const StepContext& step, KvCache& cache, const Tensor& previous_hidden_states,
                                 Tensor& outputs) {
  Backend& b = backend_;
  const int64_t hidden = config_.hidden_size;
  const int64_t width = previous_hidden_states.size(-1);
  // g: the target's layer inputs fused, or a copy of the head's own output (the layer adds into it).
  Tensor residual;
  if (width == 3 * hidden) {
    residual = b.linear(previous_hidden_states, fc_, nullptr);
  } else if (width == hidden) {
    residual = b.copy(previous_hidden_states);
  } else {
    fail("EAGLE-3 head: hidden states of width {} (expected the target's three layers, {}, or the head's own, {})",
         width, 3 * hidden, hidden);
  }
  Tensor embedded = b.embedding(embedding_.table, step, embedding_.shard);
  if (embeds_with_target_) b.all_reduce_sum(embedded);  // the target's vocab-parallel shards, as it embeds
  const Tensor x =
      b.concat_columns(b.rms_norm(embedded, input_norm_, norm_eps_), b.rms_norm(residual, hidden_norm_, norm_eps_));
  const Tensor attended = attention_->forward(b, BlockInput(b, x), cache, 0, step);
  const Tensor mixed = mlp_->forward(b, BlockInput(b, residual, attended, post_attention_norm_, norm_eps_), step);
  Tensor rows = b.gather_logit_rows(residual, step);
  const Tensor normalized = b.add_rms_norm(rows, b.gather_logit_rows(mixed, step), norm_, norm_eps_);
  outputs = rows;  // out before the norm: what the next draft reads
  return b.linear(normalized, lm_head_, nullptr);
}

std::unique_ptr<MtpModel> load_eagle3_model(const std::filesystem::path& dir, const Model& target, Backend& backend,
                                            OnlineQuantization quantization) {
  const ModelConfig config = ModelConfig::load(dir);
  if (!is_eagle3_architecture(config.architecture)) {
    fail("{}: an EAGLE-3 head's config.json names LlamaForCausalLMEagle3 (or Eagle3LlamaForCausalLM), not {}",
         (dir / "config.json").string(), config.architecture);
  }
  const Checkpoint checkpoint = Checkpoint::open(dir, nullptr, quantization);
  return std::make_unique<LlamaEagle3Model>(config, checkpoint, target, backend, (dir / "config.json").string());
}

}  // namespace tern
