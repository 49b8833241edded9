#pragma once
// DeepSeek-V4's multi-token prediction block, `mtp.0.*` of DeepSeek's released checkpoints: inference/model.py's
// MTPBlock (deepseek-ai/DeepSeek-V4-Flash, a Block of layer id num_hidden_layers, sharing the model's embed and
// head) as vLLM runs it (vllm/model_executor/models/deepseek_v4_mtp.py, DeepSeekV4MultiTokenPredictorLayer):
//   h   = the target's last layer streams at position i [hc_mult, hidden], before the head's mHC collapse
//   x_s = e_proj(enorm(embed(token i + 1))) + h_proj(hnorm(h_s))   for each stream s (norms and h_proj per stream,
//                                                                  e_proj's output added to every stream)
//   out = Block(x)                        mHC mixes around attention (the MTP layer's compress ratio) and MoE
//   logits = head(norm(hc_head(out)))     its own hc_head_fn/_base/_scale and norm, the model's head
// Both sources agree on this composition. model.py's MTPBlock takes x as [b, s, hc_mult, dim] (its __main__ feeds
// it that shape); vLLM's target stashes that same pre-hc_head residual for it. A draft after a draft reads this
// block's `out` (vLLM: the forward returns the pre-hc_head streams, hc_head runs in compute_logits), the same kind
// of state the first depth reads from the target; model.py has no chained drafting. vLLM zeroes the embedding at
// position 0; model.py does not, nor does this (nor tern's V3 layer).
// Only the released layout: transformers' DeepseekV4ForCausalLM has no MTP weights (its checkpoints drop mtp.*).
// MTP block k would be layer num_hidden_layers + k; the first is the draft, as for V3.
#include <optional>

#include "model/arch/deepseek_v4/v4_layer.h"
#include "model/checkpoint.h"
#include "model/mtp_model.h"

namespace tern {

class DeepseekV4MtpModel final : public MtpModel {
 public:
  DeepseekV4MtpModel(const ModelConfig& config, const Checkpoint& checkpoint, Backend& backend);

  const ModelConfig& config() const override { return config_; }
  std::vector<KvLayerSpec> kv_layers() const override { return {layer_.attention->kv_spec()}; }
  // previous_hidden_states and outputs: [rows, hc_mult * hidden], the streams before an mHC head.
  Tensor forward(const StepContext& step, KvCache& cache, const Tensor& previous_hidden_states,
                 Tensor& outputs) override;

 private:
  ModelConfig config_;
  DeepseekV4Config v4_;
  Backend& backend_;
  float norm_eps_;
  Tensor embed_;   // [vocab, hidden]: the model's
  Tensor enorm_;   // [hidden]
  Tensor hnorm_;   // [hidden]
  Tensor e_proj_;  // [hidden, hidden]
  Tensor h_proj_;  // [hidden, hidden]
  DecoderLayer layer_;
  std::optional<LayerHyperConnections> hyper_;
  std::optional<HyperConnection> head_hc_;
  Tensor norm_;  // [hidden]
  Tensor head_;  // [vocab, hidden]: the model's
};

}  // namespace tern
