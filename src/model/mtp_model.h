#pragma once
// A multi-token prediction (MTP) layer: DeepSeek's next-n module, trained beside the model to predict the token
// after next, which speculative decoding runs as the draft model (engine/mtp_proposer.h; vLLM's "deepseek_mtp",
// SGLang's NextN). Entry i of a sequence pairs token i + 1 with the hidden state at position i and predicts token
// i + 2; its KV cache holds one entry per position, as a decoder layer's does. The hidden state is what the target
// model returns for position i (Model::forward_with_hidden_states: DeepSeek-V3's lm_head input, DeepSeek-V4's last
// layer streams), or, for a draft after a draft, this layer's own output at position i (`outputs` below).
// An EAGLE-3 head (model/arch/llama_eagle3.h) is a layer of this kind too, trained apart from the target: it reads
// the inputs of three of the target's layers (target_layer_inputs) and predicts over a vocabulary of its own.
#include <filesystem>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "model/model_config.h"
#include "model/quantization_config.h"

namespace tern {

class MtpModel {
 public:
  virtual ~MtpModel() = default;
  virtual const ModelConfig& config() const = 0;
  virtual std::vector<KvLayerSpec> kv_layers() const = 0;
  // The step's entries: token ids are each entry's token i + 1 (at position i), `previous_hidden_states`
  // [T, width] their hidden states in the same order (what the target returns: hidden, V4's streams, EAGLE-3's three
  // layer inputs; or the layer's own `outputs`). Writes the entries' KV into `cache`, returns logits [R, the layer's
  // vocabulary] of the step's logit rows and sets `outputs` to those rows' hidden states (what a following draft step
  // reads).
  virtual Tensor forward(const StepContext& step, KvCache& cache, const Tensor& previous_hidden_states,
                         Tensor& outputs) = 0;
  // The target layers whose inputs (Model::forward_with_layer_inputs) the layer reads side by side, ascending, in
  // place of the target's hidden states (Model::forward_with_hidden_states) where not empty: EAGLE-3's three.
  virtual std::vector<int32_t> target_layer_inputs() const { return {}; }
  // The target's token id of entry `id` of the layer's vocabulary (EAGLE-3's reduced draft vocabulary: its d2t).
  virtual int32_t target_token_id(int32_t id) const { return id; }
};

// The first MTP layer of the checkpoint in `dir` (config.json's num_nextn_predict_layers > 0; DeepSeek-V3's layer
// after the decoder's, DeepSeek-V4's mtp.0); fails naming what is missing. `quantization` as load_model's.
std::unique_ptr<MtpModel> load_mtp_model(const std::filesystem::path& dir, Backend& backend,
                                         OnlineQuantization quantization = OnlineQuantization::none);

}  // namespace tern
