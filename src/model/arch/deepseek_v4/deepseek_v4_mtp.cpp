#include "model/arch/deepseek_v4/deepseek_v4_mtp.h"

#include <string>

#include "core/error.h"
#include "model/weight_loader.h"

namespace tern {

namespace {

constexpr const char* kPrefix = "mtp.0";

}  // namespace

DeepseekV4MtpModel::DeepseekV4MtpModel(const ModelConfig& config, const Checkpoint& checkpoint, Backend& backend)
    : config_(config),
      v4_(read_deepseek_v4_config(config)),
      backend_(backend),
      norm_eps_(static_cast<float>(config.rms_norm_eps)) {
  const std::string prefix = kPrefix;
  const V4CheckpointNames names = v4_checkpoint_names(checkpoint);
  const int64_t num_nextn = config.raw.value("num_nextn_predict_layers", int64_t{0});
  const bool has_layer = checkpoint.has(prefix + ".e_proj.weight");
  if (num_nextn < 1 || !has_layer) {
    fail("{}: no multi-token prediction layer (config.json's num_nextn_predict_layers is {}, and the checkpoint {} "
         "{}.e_proj.weight{})", config.architecture, num_nextn, has_layer ? "has" : "lacks", prefix,
         names.released ? "" : "; transformers' checkpoints hold none, DeepSeek's released ones do");
  }
  if (v4_.mtp_attention_kinds.empty()) {
    fail("{}: config.json gives the MTP layer no compress ratio (the released compress_ratios lists one per layer, "
         "then the MTP layers')", config.architecture);
  }
  const int64_t hidden = config.hidden_size;
  const int64_t vocab = config.vocab_size;
  WeightLoader weights(checkpoint, backend);
  WeightLoader linear = weights.linear_weights();
  embed_ = weights.load(names.embed_tokens, {vocab, hidden});
  enorm_ = weights.load(prefix + ".enorm.weight", {hidden});
  hnorm_ = weights.load(prefix + ".hnorm.weight", {hidden});
  e_proj_ = linear.load(prefix + ".e_proj.weight", {hidden, hidden});
  h_proj_ = linear.load(prefix + ".h_proj.weight", {hidden, hidden});
  layer_.attention_norm = weights.load(prefix + ".attn_norm.weight", {hidden});
  layer_.feed_forward_norm = weights.load(prefix + ".ffn_norm.weight", {hidden});
  // model.py's Gate hashes by token id only for layer ids below n_hash_layers, which the MTP block's is not.
  const V4LayerBuilder builder(config, v4_, backend, names);
  hyper_.emplace(builder.build(weights, prefix, v4_.mtp_attention_kinds.front(), false, layer_));
  head_hc_.emplace(weights, prefix + ".hc_head_fn", prefix + ".hc_head_base", prefix + ".hc_head_scale", hidden,
                   builder.hyper_params(), true, norm_eps_);
  norm_ = weights.load(prefix + ".norm.weight", {hidden});
  std::string head;
  for (const auto& name : names.lm_head) {
    if (head.empty() && checkpoint.has(name)) head = name;
  }
  if (head.empty()) {
    fail("{}: the multi-token prediction layer needs the model's head, which is missing", config.architecture);
  }
  head_ = weights.load(head, {vocab, hidden});
}

Tensor DeepseekV4MtpModel::forward(const StepContext& step, KvCache& cache, const Tensor& previous_hidden_states,
                                   Tensor& outputs) {
  Backend& b = backend_;
  const int64_t hidden = config_.hidden_size;
  const int64_t streams_count = v4_.hc_mult;
  const int64_t num_tokens = step.batch().num_tokens();
  const Tensor embedded = b.linear(b.rms_norm(b.embedding(embed_, step, {0, config_.vocab_size}), enorm_, norm_eps_),
                                   e_proj_, nullptr);
  // hnorm and h_proj act on each stream: the streams as rows [T * hc_mult, hidden].
  const Tensor per_stream = previous_hidden_states.reshape({num_tokens * streams_count, hidden});
  Tensor x = b.linear(b.rms_norm(per_stream, hnorm_, norm_eps_), h_proj_, nullptr)
                 .reshape({num_tokens, streams_count * hidden});
  Tensor broadcast = embedded;
  for (int64_t s = 1; s < streams_count; ++s) broadcast = b.concat_columns(broadcast, embedded);
  b.add_in_place(x, broadcast);
  const Tensor out = v4_layer_forward(b, layer_, *hyper_, x.reshape({num_tokens, streams_count, hidden}), cache, 0,
                                      step, norm_eps_);
  outputs = b.gather_logit_rows(out.reshape({num_tokens, streams_count * hidden}), step);
  const Tensor rows = outputs.reshape({outputs.size(0), streams_count, hidden});
  return b.linear(b.rms_norm(head_hc_->collapse(b, rows).collapsed, norm_, norm_eps_), head_, nullptr);
}

}  // namespace tern
