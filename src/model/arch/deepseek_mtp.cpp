#include "model/arch/deepseek_mtp.h"

#include <string>

#include "core/error.h"
#include "model/arch/deepseek_v3.h"
#include "model/weight_loader.h"

namespace tern {

namespace {

// The first of `names` the checkpoint holds.
std::string first_present(const WeightLoader& weights, const std::vector<std::string>& names,
                          const ModelConfig& config) {
  std::string listed;
  for (const auto& name : names) {
    if (weights.has(name)) return name;
    listed += (listed.empty() ? "" : ", ") + name;
  }
  fail("{}: the multi-token prediction layer needs one of {}, and the checkpoint has none", config.architecture,
       listed);
}

}  // namespace

DeepseekMtpModel::DeepseekMtpModel(const ModelConfig& config, const Checkpoint& checkpoint, Backend& backend)
    : config_(config), backend_(backend), norm_eps_(static_cast<float>(config.rms_norm_eps)) {
  const int64_t num_nextn = config.raw.value("num_nextn_predict_layers", int64_t{0});
  // DeepSeek's loading rule: the MTP layers' ids follow the decoder's (README_WEIGHTS.md, "Loading Rules").
  const int64_t index = config.num_layers;
  const std::string prefix = "model.layers." + std::to_string(index);
  const bool has_layer = checkpoint.has(prefix + ".eh_proj.weight");
  if (num_nextn < 1 || !has_layer) {
    fail("{}: no multi-token prediction layer (config.json's num_nextn_predict_layers is {}, and the checkpoint {} "
         "{}.eh_proj.weight)", config.architecture, num_nextn, has_layer ? "has" : "lacks", prefix);
  }
  const int64_t hidden = config.hidden_size;
  const int64_t vocab = config.vocab_size;
  // Under tensor parallelism the decoder layer is sharded as the target's (its builder's sharded loads); the
  // embedding, the projections and the head load whole on every rank.
  WeightLoader weights(checkpoint, backend);
  embed_tokens_ = weights.load(
      first_present(weights, {prefix + ".embed_tokens.weight", "model.embed_tokens.weight"}, config), {vocab, hidden});
  enorm_ = weights.load(prefix + ".enorm.weight", {hidden});
  hnorm_ = weights.load(prefix + ".hnorm.weight", {hidden});
  eh_proj_ = weights.linear_weights().load(prefix + ".eh_proj.weight", {hidden, 2 * hidden});
  layer_.attention_norm = weights.load(prefix + ".input_layernorm.weight", {hidden});
  layer_.feed_forward_norm = weights.load(prefix + ".post_attention_layernorm.weight", {hidden});
  deepseek_v3_layer_builder(config, backend)(weights, index, prefix, layer_);
  shared_head_norm_ = weights.load(prefix + ".shared_head.norm.weight", {hidden});
  std::vector<std::string> heads = {prefix + ".shared_head.head.weight", "lm_head.weight"};
  if (config.tie_word_embeddings) heads.push_back("model.embed_tokens.weight");
  head_ = weights.load(first_present(weights, heads, config), {vocab, hidden});
}

Tensor DeepseekMtpModel::forward(const StepContext& step, KvCache& cache, const Tensor& previous_hidden_states,
                                 Tensor& outputs) {
  Backend& b = backend_;
  const Tensor embedded = b.embedding(embed_tokens_, step, {0, config_.vocab_size});
  Tensor residual = b.linear(b.concat_columns(b.rms_norm(embedded, enorm_, norm_eps_),
                                              b.rms_norm(previous_hidden_states, hnorm_, norm_eps_)),
                             eh_proj_, nullptr);
  // The decoder layer's pre-norm residual stream (decoder_stack.cpp): each block's output is added by the norm that
  // reads it next, the feed-forward block's by the shared head's norm.
  const Tensor attended = layer_.attention->forward(
      b, BlockInput(b, residual, std::nullopt, layer_.attention_norm, norm_eps_), cache, 0, step);
  const Tensor mixed =
      layer_.feed_forward->forward(b, BlockInput(b, residual, attended, layer_.feed_forward_norm, norm_eps_), step);
  Tensor rows = b.gather_logit_rows(residual, step);
  outputs = b.add_rms_norm(rows, b.gather_logit_rows(mixed, step), shared_head_norm_, norm_eps_);
  return b.linear(outputs, head_, nullptr);
}

}  // namespace tern
