#pragma once
// The shell every decoder-only architecture shares: the token embedding, a stack of layers that each hold a
// normalized attention block and a normalized feed-forward block, the final norm and the lm_head. Architectures
// differ only by what their blocks are (GQA, MLA or DeepSeek-V4 attention; SwiGLU or MoE feed-forward) and, for
// DeepSeek-V4, by how the residual stream carries the blocks' outputs (mHC streams instead of one sum); so the
// blocks are interfaces (decoder_block.h) and the plain pre-norm residual loop lives here once.
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "model/checkpoint.h"
#include "model/layers/block_input.h"
#include "model/layers/decoder_block.h"
#include "model/model.h"
#include "model/weight_loader.h"

namespace tern {

struct DecoderLayer {
  Tensor attention_norm;  // [hidden]
  std::unique_ptr<AttentionBlock> attention;
  Tensor feed_forward_norm;  // [hidden]
  std::unique_ptr<FeedForwardBlock> feed_forward;
};

// Checkpoint names of the shell's weights; layer norms are `<layers>.<i>.<name>.weight`.
struct DecoderWeightNames {
  std::string embed_tokens = "model.embed_tokens.weight";
  std::string layers = "model.layers";
  std::string final_norm = "model.norm.weight";
  std::string attention_norm = "input_layernorm";
  std::string feed_forward_norm = "post_attention_layernorm";
  // The first of these present in the checkpoint; unused when config.tie_word_embeddings.
  std::vector<std::string> lm_head = {"lm_head.weight"};
};

// Fills `layer.attention` and `layer.feed_forward` of layer `index`, whose weights are under `prefix`
// ("<layers>.<index>", "model.layers.<index>" by default).
using DecoderLayerBuilder =
    std::function<void(WeightLoader& weights, int64_t index, const std::string& prefix, DecoderLayer& layer)>;

class DecoderStack {
 public:
  // Loads the embedding, each layer's norms (building its blocks with `build_layer`), the final norm and the
  // lm_head (or ties it to the embedding), by the names in `names`.
  DecoderStack(const ModelConfig& config, WeightLoader& weights, const DecoderLayerBuilder& build_layer,
               const DecoderWeightNames& names = {});

  const std::vector<DecoderLayer>& layers() const { return layers_; }
  // The feed-forward blocks that are sparse MoE blocks, in layer order.
  std::vector<SparseMoe*> expert_layers();
  std::vector<KvLayerSpec> kv_layers() const;

  Tensor embed(Backend& backend, const StepContext& step) const;  // -> [T, hidden]
  // The pre-norm residual stream (h += attention(norm(h)); h += ffn(norm(h))) through every layer, then the final
  // norm and the lm_head on the step's logit rows -> [R, vocab]. With `hidden_states`, the final norm runs on every
  // token and its output [T, hidden] goes there too (Model::forward_with_hidden_states). With `layer_inputs`, the
  // stream entering each of `captured_layers` (ascending) goes there, side by side (Model::forward_with_layer_inputs); the stream
  // itself is computed as without.
  Tensor forward(Backend& backend, const StepContext& step, KvCache& cache, Tensor* hidden_states = nullptr,
                 std::span<const int32_t> captured_layers = {}, Tensor* layer_inputs = nullptr) const;
  // rows [R, hidden] -> logits [R, vocab], for a residual stream that ends elsewhere (DeepSeek-V4's mHC head).
  Tensor final_norm_logits(Backend& backend, const Tensor& rows) const;
  TokenEmbedding token_embedding() const { return {embed_tokens_, vocab_shard_}; }

 private:
  // The lm_head of the final norm's input rows [R, hidden] -> [R, vocab], gathered from the ranks' vocab shards.
  Tensor logits(Backend& backend, const BlockInput& rows) const;

  float norm_eps_;
  VocabShard vocab_shard_;  // the token ids embed_tokens_ and lm_head_ hold on this rank
  Tensor embed_tokens_;  // [vocab shard rows, hidden]
  std::vector<DecoderLayer> layers_;
  Tensor final_norm_;              // [hidden]
  std::optional<Tensor> lm_head_;  // [vocab shard rows, hidden]; absent when tied to embed_tokens_
};

// A model that is a DecoderStack with the plain pre-norm residual stream (Llama, Qwen, Mixtral, gpt-oss,
// DeepSeek-V3).
class DecoderModel final : public Model {
 public:
  DecoderModel(const ModelConfig& config, const Checkpoint& checkpoint, Backend& backend,
               const DecoderLayerBuilder& build_layer, const DecoderWeightNames& names = {});

  const ModelConfig& config() const override { return config_; }
  std::vector<KvLayerSpec> kv_layers() const override { return stack_->kv_layers(); }
  Tensor forward(const StepContext& step, KvCache& cache) override { return stack_->forward(backend_, step, cache); }
  Tensor forward_with_hidden_states(const StepContext& step, KvCache& cache, Tensor& hidden_states) override {
    return stack_->forward(backend_, step, cache, &hidden_states);
  }
  Tensor forward_with_layer_inputs(const StepContext& step, KvCache& cache, std::span<const int32_t> layers,
                                   Tensor& layer_inputs) override {
    return stack_->forward(backend_, step, cache, nullptr, layers, &layer_inputs);
  }
  bool returns_layer_inputs() const override { return true; }
  std::optional<TokenEmbedding> token_embedding() const override { return stack_->token_embedding(); }
  std::vector<SparseMoe*> expert_layers() override { return stack_->expert_layers(); }

 private:
  ModelConfig config_;
  Backend& backend_;
  std::optional<DecoderStack> stack_;
};

}  // namespace tern
