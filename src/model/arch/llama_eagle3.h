#pragma once
// An EAGLE-3 draft head (Li et al. 2025, "EAGLE-3: Scaling up Inference Acceleration of Large Language Models via
// Training-Time Test") in the layout of the published checkpoints for Llama targets (e.g.
// yuhuili/EAGLE3-LLaMA3.1-Instruct-8B: config.json's architectures ["LlamaForCausalLMEagle3"], the target's
// hidden_size, num_hidden_layers 1, draft_vocab_size beside vocab_size). Speculative decoding runs it as the
// proposer runs an MTP layer (mtp_model.h, engine/mtp_proposer.h): its entry at position i pairs token i + 1 with
// a hidden state for position i and predicts token i + 2.
//   g      = fc(concat(a_0[i], a_1[i], a_2[i]))          fc [H, 3H]: the target's three layer inputs at i
//          = out[i]                                      a draft after a draft: the head's own output at i
//   x      = concat(input_layernorm(embed(t[i+1])), hidden_norm(g))       [T, 2H]: q/k/v_proj read 2H columns
//   r      = g + o_proj(attention(x))                    midlayer.self_attn over the head's own KV cache
//   out    = r + mlp(post_attention_layernorm(r))        midlayer.mlp; out is the pre-norm output
//   logits = lm_head(norm(out))                          [R, draft_vocab]: draft id d is the target's d + d2t[d]
// Followed (read, not copied): vLLM's vllm/model_executor/models/llama_eagle3.py (LlamaDecoderLayer, layer 0: the
// residual is g before hidden_norm; Eagle3LlamaForCausalLM: fc in combine_hidden_states, compute_logits through d2t)
// and vllm/v1/spec_decode/eagle.py (one pass over the step's target states fused by fc, then each further draft from
// the previous one's pre-norm output, `hidden_prenorm`); SGLang's python/sglang/srt/models/llama_eagle3.py (fc where
// the input's width is not the hidden size; the pre-norm output, `hidden_states_to_aux`, to the next draft);
// SafeAILab/EAGLE's eagle/model/cnets.py (Model.forward: fc where the width differs, midlayer
// LlamaDecoderLayeremb; topK_genrate: lm_head(norm(out_hidden)), drafts d + d2t[d], later depths read out_hidden).
// The target's states: the residual stream entering layers (2, L/2, L-3) of its L layers (vLLM's
// aux_hidden_state_layers, SGLang's layers_to_capture; EAGLE's modeling_llama_kv.py captures the same), or the
// layers config.json names (eagle_aux_hidden_state_layer_ids, at the top or in eagle_config), read as vLLM's
// gpu_model_runner reads them, as indices of that list (SGLang's set_eagle3_layers_to_capture adds one to each).
// The embedding is the head's embed_tokens where the checkpoint has one, else the target's table, shared. t2d, the
// reverse map, is not read (neither engine reads it). Under tensor parallelism every rank loads the head: its
// decoder layer sharded as the target's layers are (q/k/v and gate/up by output rows, o_proj and down by input
// columns, each followed by an all-reduce), fc, the norms and lm_head whole; a shared embedding is the rank's
// vocab-parallel shard of the target's, summed over the ranks as the target sums it.
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/checkpoint.h"
#include "model/layers/attention.h"
#include "model/layers/gated_mlp.h"
#include "model/model.h"
#include "model/mtp_model.h"

namespace tern {

class LlamaEagle3Model final : public MtpModel {
 public:
  // `target`: the model the head drafts for; it must return its layers' inputs (Model::returns_layer_inputs) and
  // have the head's hidden size and vocabulary. `origin` names the head in errors (its config.json).
  LlamaEagle3Model(const ModelConfig& config, const Checkpoint& checkpoint, const Model& target, Backend& backend,
                   const std::string& origin);

  const ModelConfig& config() const override { return config_; }
  std::vector<KvLayerSpec> kv_layers() const override { return {attention_->kv_spec()}; }
  // `previous_hidden_states`: the target's three layer inputs [T, 3H] (fused by fc) or the head's own `outputs`
  // [T, H]; `outputs` [R, H]: the logit rows' pre-norm outputs.
  Tensor forward(const StepContext& step, KvCache& cache, const Tensor& previous_hidden_states,
                 Tensor& outputs) override;
  std::vector<int32_t> target_layer_inputs() const override { return target_layers_; }
  int32_t target_token_id(int32_t id) const override { return draft_to_target_[static_cast<size_t>(id)]; }

 private:
  ModelConfig config_;
  Backend& backend_;
  float norm_eps_;
  std::vector<int32_t> target_layers_;  // three, ascending
  TokenEmbedding embedding_;            // the head's [vocab, H], or this rank's shard of the target's
  bool embeds_with_target_ = false;
  Tensor fc_;                           // [H, 3H]
  Tensor input_norm_;                   // [H], of the embedding
  Tensor hidden_norm_;                  // [H], of g
  std::unique_ptr<GqaAttention> attention_;  // q/k/v_proj [., 2H], o_proj [H, heads * head_dim]
  Tensor post_attention_norm_;          // [H]
  std::unique_ptr<GatedMlp> mlp_;
  Tensor norm_;                         // [H]
  Tensor lm_head_;                      // [draft_vocab, H]
  std::vector<int32_t> draft_to_target_;  // [draft_vocab]: d + d2t[d]
};

// The target layers whose inputs a head of config.json `config` (at `origin`) reads, for a target of
// `num_target_layers` layers: eagle_aux_hidden_state_layer_ids where given, else (2, L/2, L-3), in ascending order;
// fails naming them unless they are three distinct layers in [0, L].
std::vector<int32_t> eagle3_target_layers(const nlohmann::json& config, int64_t num_target_layers,
                                          const std::string& origin);

// The EAGLE-3 head in `dir` (config.json and safetensors) for `target`, on `backend`; fails naming what does not fit.
// `quantization` as load_model's.
std::unique_ptr<MtpModel> load_eagle3_model(const std::filesystem::path& dir, const Model& target, Backend& backend,
                                            OnlineQuantization quantization = OnlineQuantization::none);

}  // namespace tern
