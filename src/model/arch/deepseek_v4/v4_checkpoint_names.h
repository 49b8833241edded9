#pragma once
// The two namings of DeepSeek-V4 checkpoints. DeepSeek's released checkpoints (deepseek-ai/DeepSeek-V4-*) name
// tensors after the modules of their inference/model.py, which vLLM's models/deepseek_v4.py maps onto its own
// (_make_deepseek_v4_weights_mapper); transformers' save_pretrained of DeepseekV4ForCausalLM (the fixtures) names
// them after its modules. They differ at the top and in one layer norm:
//
//   released                        transformers
//   embed.weight                    model.embed_tokens.weight
//   norm.weight                     model.norm.weight
//   head.weight                     head.weight (lm_head.weight in later versions)
//   hc_head_fn, _base, _scale       model.hc_head.hc_fn, .hc_base, .hc_scale
//   layers.<i>.attn.kv_norm.weight  model.layers.<i>.attn.norm.weight
//   layers.<i>.<rest>               model.layers.<i>.<rest>  (attn.wq_a, attn.compressor.*, attn.indexer.*,
//                                   ffn.gate.{weight,bias,tid2eid}, ffn.experts.<e>.w1, ffn.shared_experts.w2, ...)
//   mtp.<k>.*                       none: transformers does not instantiate the MTP layers
//
// Every tensor keeps its shape: nothing is transposed, split or fused in either file (vLLM fuses wq_a with wkv and
// w1 with w3, and transformers stacks the experts, only as they load). wo_a is [o_groups * o_lora_rank,
// heads * head_dim / o_groups] in both, viewed as [o_groups, o_lora_rank, ...] (model.py's Attention.forward).
// The released checkpoints also quantize: `X.weight` F8_E4M3 with `X.scale`, and I8 FP4 experts
// (docs/quantization.md; the Checkpoint attaches the scales).
#include <string>
#include <vector>

#include "model/checkpoint.h"

namespace tern {

struct V4CheckpointNames {
  bool released = false;
  std::string embed_tokens;
  std::string layers;  // layer i's tensors are under "<layers>.<i>."
  std::string final_norm;
  std::vector<std::string> lm_head;  // the first present is loaded
  std::string hc_head_fn;
  std::string hc_head_base;
  std::string hc_head_scale;
  std::string kv_norm;  // the attention's K=V norm, under "<layers>.<i>.attn."
};

// DeepSeek's naming when the checkpoint holds `embed.weight`, else transformers'.
V4CheckpointNames v4_checkpoint_names(const Checkpoint& checkpoint);

// The released name of a tensor named as transformers writes it; fails naming the tensor for a name outside the
// table above.
std::string v4_released_name(const std::string& transformers_name);

}  // namespace tern
