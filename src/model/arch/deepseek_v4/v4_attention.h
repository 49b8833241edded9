#pragma once
// DeepSeek-V4's attention block: low-rank queries with an unweighted per-head norm, one shared K=V head over a
// sliding window, per-head sinks, and for CSA / HCA layers compressed entries of earlier windows (the Lightning
// Indexer picks which ones for CSA); the rope slice of the output is rotated back to the query position before the
// grouped low-rank output projection.
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "model/arch/deepseek_v4/v4_config.h"
#include "model/layers/decoder_block.h"
#include "model/weight_loader.h"

namespace tern {

class V4Attention final : public AttentionBlock {
 public:
  // Loads `<prefix>.wq_a`, `.q_norm`, `.wq_b`, `.wkv`, `.<kv_norm>`, `.wo_a`, `.wo_b`, `.attn_sink`, and for
  // compressed layers `<prefix>.compressor.*` (and `<prefix>.indexer.*` for CSA). The projections wq_a, wq_b, wkv,
  // wo_a, wo_b and the indexer's wq_b may be block FP8 (DeepSeek's released checkpoints); the compressors and the
  // indexer's weights_proj are not quantized there (inference/model.py builds them in bf16 or float32).
  V4Attention(WeightLoader& weights, const std::string& prefix, const ModelConfig& config,
              const DeepseekV4Config& v4, V4AttentionKind kind, const RopeTable& rope, const std::string& kv_norm);

  KvLayerSpec kv_spec() const override;
  // x [T, hidden] (normalized block input) -> [T, hidden].
  Tensor forward(Backend& backend, const BlockInput& input, KvCache& cache, int layer,
                 const StepContext& step) const override;

 private:
  struct Compressor {
    int64_t kv_column = 0;  // where its wkv's [width] columns start in side_weight_'s output, wgate's after them
    Tensor position_bias;  // [compress_rate, width]
    Tensor norm;           // [entry_dim]
    CompressorParams params;  // its tensor pointers are filled in at each call
  };
  struct Indexer {
    Compressor compressor;
    Tensor query_weight;    // [index_heads * index_head_dim, q_lora_rank]
    int64_t weights_column = 0;  // where weights_proj's [index_heads] columns start in side_weight_'s output
    IndexerParams params;
    int64_t num_heads = 0;
    int64_t head_dim = 0;
  };

  // Appends the compressor's wkv and wgate to `stacked` (names and shapes), their columns from `column` on.
  Compressor load_compressor(WeightLoader& weights, const std::string& prefix, int64_t hidden, int64_t entry_dim,
                             int64_t state_offset, std::vector<std::pair<std::string, std::vector<int64_t>>>& stacked,
                             int64_t& column) const;
  void compress(Backend& backend, const Compressor& compressor, const Tensor& side, KvCache& cache, int layer,
                const StepContext& step) const;

  V4AttentionKind kind_;
  int64_t num_heads_ = 0;
  int64_t head_dim_ = 0;
  int64_t o_groups_ = 0;
  int64_t o_lora_rank_ = 0;
  int64_t sliding_window_ = 0;
  int64_t compress_rate_ = 0;
  float norm_eps_ = 1e-6f;
  RopeTable rope_;
  int64_t q_lora_rank_ = 0;
  // The input's projections as two products of weights stacked by rows, so that a decode step reads the input once
  // for each (on the CUDA backend at one row: a GEMV with the input's norm): [wq_a; wkv], which may be block FP8,
  // and the unquantized rest, [compressor wkv; wgate; indexer compressor wkv; wgate; indexer weights_proj]
  // (compressed layers only). The outputs' columns are sliced apart (views at one row).
  Tensor q_a_kv_weight_;  // [q_lora_rank + head_dim, hidden]
  Tensor side_weight_;    // [compressor and indexer columns, hidden]
  Tensor q_a_norm_;     // [q_lora_rank]
  Tensor q_b_weight_;   // [heads * head_dim, q_lora_rank]
  Tensor head_ones_;    // [head_dim]: the weight of the unweighted per-head query norm
  Tensor kv_norm_;      // [head_dim]
  Tensor o_a_weight_;   // [o_groups, o_lora_rank, heads * head_dim / o_groups]
  Tensor o_b_weight_;   // [hidden, o_groups * o_lora_rank]
  Tensor sinks_;        // [heads]
  std::optional<Compressor> compressor_;
  std::optional<Indexer> indexer_;
};

}  // namespace tern
