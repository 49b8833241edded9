#pragma once
// The config.json fields of DeepSeek-V4 beyond ModelConfig's, with transformers' DeepseekV4Config defaults and its
// legacy spellings (compress_ratios, num_hash_layers, qk_rope_head_dim, flat rope settings), which are those of
// DeepSeek's released config.json.
#include <cstdint>
#include <string>
#include <vector>

#include "model/model_config.h"
#include "model/rope.h"

namespace tern {

enum class V4AttentionKind {
  sliding,              // sliding-window K=V attention only ("sliding_attention")
  compressed_sparse,    // + CSA: overlapping compression, Lightning Indexer top-k ("compressed_sparse_attention")
  heavily_compressed    // + HCA: non-overlapping compression, every closed window ("heavily_compressed_attention")
};

struct DeepseekV4Config {
  int64_t q_lora_rank = 0;
  int64_t o_groups = 0;
  int64_t o_lora_rank = 0;
  int64_t sliding_window = 0;
  int64_t csa_compress_rate = 4;
  int64_t hca_compress_rate = 128;
  int64_t index_num_heads = 0;
  int64_t index_head_dim = 0;
  int64_t index_topk = 0;
  int64_t hc_mult = 0;
  int64_t hc_sinkhorn_iters = 0;
  float hc_eps = 1e-6f;
  std::vector<V4AttentionKind> attention_kinds;  // per layer
  // Per MTP layer (mtp.<k>), where config.json lists them after the layers' (the released compress_ratios does:
  // inference/model.py builds MTP block k as layer num_hidden_layers + k, with that entry's ratio).
  std::vector<V4AttentionKind> mtp_attention_kinds;
  std::vector<bool> hash_moe;                    // per layer: experts picked by the token id
  // MoE
  int64_t num_experts = 0;
  int64_t num_experts_per_token = 0;
  int64_t moe_intermediate_size = 0;
  int64_t num_shared_experts = 0;
  float routed_scaling = 1.0f;
  float swiglu_limit = 0.0f;
  // Sliding-only layers rotate with `main`; compressed layers, their compressors and indexers with `compress`.
  RopeConfig main_rope;
  RopeConfig compress_rope;

  int64_t compress_rate(V4AttentionKind kind) const {
    return kind == V4AttentionKind::compressed_sparse    ? csa_compress_rate
           : kind == V4AttentionKind::heavily_compressed ? hca_compress_rate
                                                         : 0;
  }
};

DeepseekV4Config read_deepseek_v4_config(const ModelConfig& config);

}  // namespace tern
