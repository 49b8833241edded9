#include "model/layers/decoder_stack.h"

#include "core/error.h"
#include "model/layers/sparse_moe.h"

namespace tern {

DecoderStack::DecoderStack(const ModelConfig& config, WeightLoader& weights, const DecoderLayerBuilder& build_layer,
                           const DecoderWeightNames& names)
    : norm_eps_(static_cast<float>(config.rms_norm_eps)) {
  const int64_t hidden = config.hidden_size;
  if (config.num_layers < 1) fail("{}: num_hidden_layers {} must be >= 1", config.architecture, config.num_layers);
  // Vocab-parallel under tensor parallelism: each rank holds a shard of the embedding and of the lm_head.
  vocab_shard_ = {weights.shard().rank * weights.vocab_shard_rows(config.vocab_size), config.vocab_size};
  embed_tokens_ = weights.load_vocab_shard(names.embed_tokens, {config.vocab_size, hidden});
  for (int64_t i = 0; i < config.num_layers; ++i) {
    const std::string prefix = names.layers + "." + std::to_string(i);
    DecoderLayer& layer = layers_.emplace_back();
    layer.attention_norm = weights.load(prefix + "." + names.attention_norm + ".weight", {hidden});
    layer.feed_forward_norm = weights.load(prefix + "." + names.feed_forward_norm + ".weight", {hidden});
    build_layer(weights, i, prefix, layer);
    if (!layer.attention || !layer.feed_forward) fail("{}: layer {} was built without its blocks", config.architecture, i);
  }
  final_norm_ = weights.load(names.final_norm, {hidden});
  if (config.tie_word_embeddings) return;
  for (const auto& name : names.lm_head) {
    if (weights.has(name)) {
      lm_head_ = weights.load_vocab_shard(name, {config.vocab_size, hidden});
      return;
    }
  }
  fail("{}: the checkpoint has no lm_head ({}) and tie_word_embeddings is false", config.architecture,
       names.lm_head.empty() ? std::string("no name given") : names.lm_head.front());
}

std::vector<SparseMoe*> DecoderStack::expert_layers() {
  std::vector<SparseMoe*> moe;
  for (auto& layer : layers_) {
    if (auto* block = dynamic_cast<SparseMoe*>(layer.feed_forward.get())) moe.push_back(block);
  }
  return moe;
}

std::vector<KvLayerSpec> DecoderStack::kv_layers() const {
  std::vector<KvLayerSpec> specs;
  for (const auto& layer : layers_) specs.push_back(layer.attention->kv_spec());
  return specs;
}

Tensor DecoderStack::embed(Backend& backend, const StepContext& step) const {
  Tensor embedded = backend.embedding(embed_tokens_, step, vocab_shard_);
  backend.all_reduce_sum(embedded);
  return embedded;
}

Tensor DecoderStack::logits(Backend& backend, const BlockInput& rows) const {
  return backend.all_gather_columns(rows.linear(lm_head_ ? *lm_head_ : embed_tokens_), vocab_shard_.vocab_size);
}

Tensor DecoderStack::forward(Backend& backend, const StepContext& step, KvCache& cache, Tensor* hidden_states) const {
  Tensor residual = embed(backend, step);
  // Each block's output is added into the residual by the norm that reads it next (BlockInput): the next block's,
  // or the final norm.
  std::optional<Tensor> output;
  for (size_t i = 0; i < layers_.size(); ++i) {
    const DecoderLayer& layer = layers_[i];
    const Tensor attended =
        layer.attention->forward(backend, BlockInput(backend, residual, std::move(output), layer.attention_norm, norm_eps_),
                                 cache, static_cast<int>(i), step);
    output = layer.feed_forward->forward(
        backend, BlockInput(backend, residual, attended, layer.feed_forward_norm, norm_eps_), step);
  }
  if (hidden_states) {
    *hidden_states = output ? backend.add_rms_norm(residual, *output, final_norm_, norm_eps_)
                            : backend.rms_norm(residual, final_norm_, norm_eps_);
    return backend.all_gather_columns(
        backend.linear(backend.gather_logit_rows(*hidden_states, step), lm_head_ ? *lm_head_ : embed_tokens_, nullptr),
        vocab_shard_.vocab_size);
  }
  // The final norm runs only on the rows whose logits are asked for, as one op with the lm_head (at batch-1 decode
  // on the CUDA backend the lm_head's GEMV adds and normalizes).
  Tensor rows = backend.gather_logit_rows(residual, step);
  std::optional<Tensor> output_rows;
  if (output) output_rows = backend.gather_logit_rows(*output, step);
  return logits(backend, BlockInput(backend, rows, std::move(output_rows), final_norm_, norm_eps_));
}

Tensor DecoderStack::final_norm_logits(Backend& backend, const Tensor& rows) const {
  Tensor residual = rows;  // only read: no addend
  return logits(backend, BlockInput(backend, residual, std::nullopt, final_norm_, norm_eps_));
}

DecoderModel::DecoderModel(const ModelConfig& config, const Checkpoint& checkpoint, Backend& backend,
                           const DecoderLayerBuilder& build_layer, const DecoderWeightNames& names)
    : config_(config), backend_(backend) {
  WeightLoader weights(checkpoint, backend);
  stack_.emplace(config_, weights, build_layer, names);
}

}  // namespace tern
