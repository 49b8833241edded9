#pragma once
// A loaded model: what it caches per token and layer, and one forward step over a batch.
#include <filesystem>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "model/model_config.h"
#include "model/quantization_config.h"

namespace tern {

class LoadProgress;
class SparseMoe;

class Model {
 public:
  virtual ~Model() = default;
  virtual const ModelConfig& config() const = 0;
  // What each layer keeps in the KV cache per token (sizes the block pool).
  virtual std::vector<KvLayerSpec> kv_layers() const = 0;
  // Computes the step's new tokens, writing their KV into `cache`; returns logits [R, vocab] for the batch's
  // logit_rows.
  virtual Tensor forward(const StepContext& step, KvCache& cache) = 0;
  // The MoE blocks, in layer order (what an expert load balancer places).
  virtual std::vector<SparseMoe*> expert_layers() { return {}; }
};

// Reads config.json and the weights of a Hugging Face model directory and builds the model for its architecture;
// `progress`, where given, counts the bytes loaded. `quantization` fp8 quantizes unquantized linear weights to block
// FP8 as they load (Checkpoint::open says which checkpoints take it).
std::unique_ptr<Model> load_model(const std::filesystem::path& dir, Backend& backend, LoadProgress* progress = nullptr,
                                  OnlineQuantization quantization = OnlineQuantization::none);

}  // namespace tern
