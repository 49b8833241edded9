#pragma once
// DeepSeek-V3's multi-token prediction module (README_WEIGHTS.md of deepseek-ai/DeepSeek-V3: "MTP Modules"), layer
// `num_hidden_layers` of the checkpoint:
//   x   = eh_proj(concat(enorm(embed(token i + 1)), hnorm(h_i)))      eh_proj [hidden, 2 hidden]
//   out = x + attention(...) + ffn(...)                                 a decoder layer as its index would have
//   h'  = shared_head.norm(out),  logits = shared_head.head(h')
// The concatenation order (embedding first) is that of vLLM's DeepSeekMultiTokenPredictorLayer
// (vllm/model_executor/models/deepseek_mtp.py) and SGLang's DeepseekModelNextN (srt/models/deepseek_nextn.py).
// Both engines feed h_i as their DeepSeek model returns it, after the final norm (DeepseekV2Model.forward ends with
// self.norm), which is the lm_head's input. A draft after a draft reads h' (SGLang's choice, where the normalized
// output is what its logits processor hands back; vLLM feeds `out`): each depth reads the hidden state its head
// reads, as the first depth reads the target's. vLLM zeroes the embedding at position 0; SGLang and the DeepSeek-V3
// report's equations do not, nor does this.
// The embedding and the head are shared with the target (the report); a checkpoint may store them in the layer too
// (embed_tokens, shared_head.head: the Hugging Face V3 checkpoint does), and else the target's are read.
#include <optional>

#include "model/checkpoint.h"
#include "model/layers/decoder_stack.h"
#include "model/mtp_model.h"

namespace tern {

class DeepseekMtpModel final : public MtpModel {
 public:
  DeepseekMtpModel(const ModelConfig& config, const Checkpoint& checkpoint, Backend& backend);

  const ModelConfig& config() const override { return config_; }
  std::vector<KvLayerSpec> kv_layers() const override { return {layer_.attention->kv_spec()}; }
  Tensor forward(const StepContext& step, KvCache& cache, const Tensor& previous_hidden_states,
                 Tensor& outputs) override;

 private:
  ModelConfig config_;
  Backend& backend_;
  float norm_eps_;
  Tensor embed_tokens_;      // [vocab, hidden]
  Tensor enorm_;             // [hidden]
  Tensor hnorm_;             // [hidden]
  Tensor eh_proj_;           // [hidden, 2 hidden]: columns [0, hidden) read the embedding, [hidden, 2 hidden) h
  DecoderLayer layer_;
  Tensor shared_head_norm_;  // [hidden]
  Tensor head_;              // [vocab, hidden]
};

}  // namespace tern
