#pragma once
// DeepSeek-V4 data passed between the model and the backend's compressed-attention and hyper-connection ops.
//
// A compressed layer caches, per token slot, its sliding-window key (K = V) in `keys` and, in its `states` row,
// one region per compressor: [kv (width) | gate (width, position bias added) | entry (entry_dim)]. The entry part
// is written only in the slot of the token that closes a window of `compress_rate` tokens, and holds that
// window's compressed key (pooled, RMS-normalized, rotated at the window's first position).
#include <cstdint>

#include "backend/tensor.h"

namespace tern {

struct KvCache;
struct RopeTable;

// One compressor: the attention's (entry_dim = head_dim) or the Lightning Indexer's (entry_dim = index_head_dim).
struct CompressorParams {
  int64_t compress_rate = 0;
  int64_t entry_dim = 0;
  // CSA: each token projects 2 * entry_dim features; entry w pools window w-1's first halves together with window
  // w's second halves (2 * compress_rate slots). HCA: entry w pools window w alone.
  bool overlapping = false;
  int64_t state_offset = 0;  // first float of this compressor's region in the layer's state row
  const Tensor* position_bias = nullptr;  // [compress_rate, width], added to the gate of each window slot
  const Tensor* norm_weight = nullptr;    // [entry_dim]
  float norm_eps = 1e-6f;
  const RopeTable* rope = nullptr;

  int64_t width() const { return overlapping ? 2 * entry_dim : entry_dim; }
  int64_t entry_offset() const { return state_offset + 2 * width(); }
  int64_t state_dim() const { return 2 * width() + entry_dim; }
};

// The Lightning Indexer's choice of compressed entries: score_w = sum_h weight_h * relu(q_h . k_w) * softmax_scale
// over the entries of closed windows, keeping the best top_k.
struct IndexerParams {
  int64_t compress_rate = 0;
  int64_t top_k = 0;
  int64_t entry_offset = 0;  // where the indexer's compressed keys lie in the layer's state row
  float softmax_scale = 1.0f;
  float weights_scale = 1.0f;  // multiplies the per-head weights
};

// Attention of a V4 layer: shared K = V over the last `sliding_window` tokens plus compressed entries, with
// per-head sinks. A query at position p sees the entries of windows that closed at or before p: all of them (HCA),
// or those the indexer selected (CSA).
struct CompressedAttentionParams {
  float scale = 1.0f;
  int64_t sliding_window = 0;
  const Tensor* sinks = nullptr;  // [num_heads]
  int64_t compress_rate = 0;      // 0: a sliding-window-only layer
  int64_t entry_offset = 0;       // where the attention's compressed entries lie in the layer's state row
  const Tensor* selected = nullptr;  // [T, top_k] int32 entry indices, -1 for none; null: every closed window
};

// Manifold-constrained hyper-connections (mHC): num_streams residual streams mixed around every block.
struct HyperMixParams {
  int64_t num_streams = 0;
  int64_t sinkhorn_iters = 0;
  float eps = 1e-6f;  // hc_eps
};

// A block's mHC weights (Backend::hyper_mix) and its input, the streams collapsed by them (Backend::hyper_collapse).
struct HyperMixed {
  Tensor mix;
  Tensor collapsed;
};

// The shape checks every backend runs before these ops, so that each reports a misfit in the same words (the
// backends check dtypes and the step's token count themselves).
// The layer's state rows, checked to hold `end` floats per token.
const Tensor& compressed_layer_states(const KvCache& cache, int layer, int64_t end, const char* op);
void check_hyper_mix(const Tensor& mixes, const Tensor& base, const Tensor& scale, const HyperMixParams& params);
void check_hyper_collapse(const Tensor& streams, const Tensor& mix);
// Both of the above, and streams of the mixes' stream count.
void check_hyper_mix_collapse(const Tensor& streams, const Tensor& mixes, const Tensor& base, const Tensor& scale,
                              const HyperMixParams& params);
void check_hyper_expand(const Tensor& streams, const Tensor& block_out, const Tensor& mix);
void check_compress_kv(const Tensor& kv, const Tensor& gate, const CompressorParams& params, int64_t num_tokens);
void check_compressed_attention(const Tensor& query, const KvCache& cache, int layer,
                                const CompressedAttentionParams& params);

}  // namespace tern
