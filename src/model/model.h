#pragma once
// A loaded model: what it caches per token and layer, and one forward step over a batch.
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "core/error.h"
#include "model/model_config.h"
#include "model/quantization_config.h"

namespace tern {

class LoadProgress;
class SparseMoe;

// A rank's token embedding table [shard rows, hidden] and the ids its rows hold.
struct TokenEmbedding {
  Tensor table;
  VocabShard shard;
};

class Model {
 public:
  virtual ~Model() = default;
  virtual const ModelConfig& config() const = 0;
  // What each layer keeps in the KV cache per token (sizes the block pool).
  virtual std::vector<KvLayerSpec> kv_layers() const = 0;
  // Computes the step's new tokens, writing their KV into `cache`; returns logits [R, vocab] for the batch's
  // logit_rows.
  virtual Tensor forward(const StepContext& step, KvCache& cache) = 0;
  // forward, and at every token of the step the state DeepSeek's multi-token prediction layer reads into
  // `hidden_states` [T, width]: DeepSeek-V3's final norm output, the lm_head's input [T, hidden] (vLLM's and SGLang's
  // DeepSeek models hand it the normalized rows), DeepSeek-V4's last layer streams before its head's mHC collapse
  // [T, hc_mult * hidden] (see mtp_model.h). Only a model that drafts for itself this way needs it.
  virtual Tensor forward_with_hidden_states(const StepContext& step, KvCache& cache, Tensor& hidden_states) {
    (void)step, (void)cache, (void)hidden_states;
    fail("{}: this architecture does not return its hidden states (multi-token prediction)", config().architecture);
  }
  // forward, and into `layer_inputs` [T, layers.size() * hidden] the residual stream entering each of `layers` (the
  // embedding plus every earlier layer's blocks; index num_layers: the stream after the last layer, before the final
  // norm; ascending), side by side: the target states an EAGLE-3 head fuses (model/arch/llama_eagle3.h). Only
  // a model whose layers add into one residual stream has them (returns_layer_inputs).
  virtual Tensor forward_with_layer_inputs(const StepContext& step, KvCache& cache, std::span<const int32_t> layers,
                                           Tensor& layer_inputs) {
    (void)step, (void)cache, (void)layers, (void)layer_inputs;
    fail("{}: this architecture does not return its layers' inputs (EAGLE-3)", config().architecture);
  }
  virtual bool returns_layer_inputs() const { return false; }
  // This rank's token embedding and the ids it holds (all of them, or a vocab-parallel shard whose embeddings are
  // summed over the ranks), for a draft head that embeds with the target's table (EAGLE-3 heads without their own);
  // nullopt where the model does not share it.
  virtual std::optional<TokenEmbedding> token_embedding() const { return std::nullopt; }
  // The MoE blocks, in layer order (what an expert load balancer places).
  virtual std::vector<SparseMoe*> expert_layers() { return {}; }
};

// Reads config.json and the weights of a Hugging Face model directory and builds the model for its architecture;
// `progress`, where given, counts the bytes loaded. `quantization` fp8 quantizes unquantized linear weights to block
// FP8 as they load (Checkpoint::open says which checkpoints take it).
std::unique_ptr<Model> load_model(const std::filesystem::path& dir, Backend& backend, LoadProgress* progress = nullptr,
                                  OnlineQuantization quantization = OnlineQuantization::none);

}  // namespace tern
