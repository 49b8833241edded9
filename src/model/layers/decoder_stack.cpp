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

Tensor DecoderStack::forward(Backend& backend, const StepContext& step, KvCache& cache, Tensor* hidden_states,
                             std::span<const int32_t> captured_layers, Tensor* layer_inputs) const {
  Tensor residual = embed(backend, step);
  // Each block's output is added into the residual by the norm that reads it next (BlockInput): the next block's,
  // or the final norm.
  std::optional<Tensor> output;
  // A captured layer's input is a copy of the stream with the pending output added, so that the stream itself goes
  // on through the same ops (the fused add and norm) as in a forward without captures.
  std::optional<Tensor> captured;
  size_t next_capture = 0;  // into captured_layers
  const auto capture_inputs_of = [&](size_t index) {
    if (next_capture == captured_layers.size() || static_cast<size_t>(captured_layers[next_capture]) != index) return;
    ++next_capture;
    Tensor input = backend.copy(residual);
    if (output) backend.add_in_place(input, *output);
    captured = captured ? backend.concat_columns(*captured, input) : input;
  };
  if (layer_inputs) {
    for (size_t i = 0; i < captured_layers.size(); ++i) {
      if (captured_layers[i] < 0 || captured_layers[i] > static_cast<int32_t>(layers_.size()) ||
          (i > 0 && captured_layers[i] <= captured_layers[i - 1])) {
        fail("layer inputs: layers must ascend within [0, {}] (got {} at position {})", layers_.size(),
             captured_layers[i], i);
      }
    }
  }
  for (size_t i = 0; i < layers_.size(); ++i) {
    if (layer_inputs) capture_inputs_of(i);
    const DecoderLayer& layer = layers_[i];
    const Tensor attended =
        layer.attention->forward(backend, BlockInput(backend, residual, std::move(output), layer.attention_norm, norm_eps_),
                                 cache, static_cast<int>(i), step);
    output = layer.feed_forward->forward(
        backend, BlockInput(backend, residual, attended, layer.feed_forward_norm, norm_eps_), step);
  }
  if (layer_inputs) {
    capture_inputs_of(layers_.size());
    *layer_inputs = captured ? *captured : Tensor{};
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
