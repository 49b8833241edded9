#include "model/arch/deepseek_v4/v4_attention.h"

#include <cmath>

#include "core/error.h"

namespace tern {

V4Attention::V4Attention(WeightLoader& weights, const std::string& prefix, const ModelConfig& config,
                         const DeepseekV4Config& v4, V4AttentionKind kind, const RopeTable& rope,
                         const std::string& kv_norm)
    : kind_(kind),
      num_heads_(config.num_heads),
      head_dim_(config.head_dim),
      o_groups_(v4.o_groups),
      o_lora_rank_(v4.o_lora_rank),
      sliding_window_(v4.sliding_window),
      compress_rate_(v4.compress_rate(kind)),
      norm_eps_(static_cast<float>(config.rms_norm_eps)),
      rope_(rope),
      q_lora_rank_(v4.q_lora_rank) {
  if (weights.backend().decode_context_parallel()) {
    fail("decode context parallelism: {} is DeepSeek-V4's compressed attention (sliding window, sinks and compressed "
         "entries); not supported", prefix);
  }
  if (config.num_kv_heads != 1) fail("{}: V4 attention shares one K=V head, got {}", prefix, config.num_kv_heads);
  const int64_t hidden = config.hidden_size;
  const int64_t width = num_heads_ * head_dim_;
  WeightLoader linear = weights.linear_weights();
  q_a_kv_weight_ = linear.load_concat(
      {{prefix + ".wq_a.weight", {v4.q_lora_rank, hidden}}, {prefix + ".wkv.weight", {head_dim_, hidden}}});
  q_a_norm_ = weights.load(prefix + ".q_norm.weight", {v4.q_lora_rank});
  q_b_weight_ = linear.load(prefix + ".wq_b.weight", {width, v4.q_lora_rank});
  head_ones_ = weights.backend().from_host_f32(std::vector<float>(head_dim_, 1.0f), {head_dim_});
  kv_norm_ = weights.load(prefix + "." + kv_norm + ".weight", {head_dim_});
  o_a_weight_ = weights.grouped_weights()
                    .load(prefix + ".wo_a.weight", {o_groups_ * o_lora_rank_, width / o_groups_})
                    .reshape({o_groups_, o_lora_rank_, width / o_groups_});
  o_b_weight_ = linear.load(prefix + ".wo_b.weight", {hidden, o_groups_ * o_lora_rank_});
  sinks_ = weights.load(prefix + ".attn_sink", {num_heads_});
  if (kind_ == V4AttentionKind::sliding) return;

  std::vector<std::pair<std::string, std::vector<int64_t>>> side;
  int64_t column = 0;
  compressor_ = load_compressor(weights, prefix + ".compressor", hidden, head_dim_, 0, side, column);
  if (kind_ == V4AttentionKind::compressed_sparse) {
    Indexer& indexer = indexer_.emplace();
    indexer.num_heads = v4.index_num_heads;
    indexer.head_dim = v4.index_head_dim;
    indexer.compressor = load_compressor(weights, prefix + ".indexer.compressor", hidden, v4.index_head_dim,
                                         compressor_->params.state_dim(), side, column);
    indexer.query_weight = linear.load(prefix + ".indexer.wq_b.weight",
                                       {v4.index_num_heads * v4.index_head_dim, v4.q_lora_rank});
    indexer.weights_column = column;
    side.push_back({prefix + ".indexer.weights_proj.weight", {v4.index_num_heads, hidden}});
    indexer.params.compress_rate = compress_rate_;
    indexer.params.top_k = v4.index_topk;
    indexer.params.entry_offset = indexer.compressor.params.entry_offset();
    indexer.params.softmax_scale = 1.0f / std::sqrt(static_cast<float>(v4.index_head_dim));
    indexer.params.weights_scale = 1.0f / std::sqrt(static_cast<float>(v4.index_num_heads));
  }
  side_weight_ = weights.load_concat(side);
}

V4Attention::Compressor V4Attention::load_compressor(
    WeightLoader& weights, const std::string& prefix, int64_t hidden, int64_t entry_dim, int64_t state_offset,
    std::vector<std::pair<std::string, std::vector<int64_t>>>& stacked, int64_t& column) const {
  Compressor c;
  c.params.compress_rate = compress_rate_;
  c.params.entry_dim = entry_dim;
  c.params.overlapping = kind_ == V4AttentionKind::compressed_sparse;
  c.params.state_offset = state_offset;
  c.params.norm_eps = norm_eps_;
  const int64_t width = c.params.width();
  c.kv_column = column;
  stacked.push_back({prefix + ".wkv.weight", {width, hidden}});
  stacked.push_back({prefix + ".wgate.weight", {width, hidden}});
  column += 2 * width;
  c.position_bias = weights.load(prefix + ".ape", {compress_rate_, width});
  c.norm = weights.load(prefix + ".norm.weight", {entry_dim});
  return c;
}

KvLayerSpec V4Attention::kv_spec() const {
  KvLayerSpec spec;
  spec.num_kv_heads = 1;
  spec.key_dim = head_dim_;
  spec.value_dim = 0;  // K = V
  spec.sliding_window_tokens = sliding_window_;
  if (kind_ == V4AttentionKind::sliding) {
    spec.kind = KvLayerKind::sliding_window;
    return spec;
  }
  spec.kind = KvLayerKind::compressed;
  spec.compress_rate = compress_rate_;
  spec.state_dim = compressor_->params.state_dim() + (indexer_ ? indexer_->compressor.params.state_dim() : 0);
  // A token at position p sees (p + 1) / rate entries; ties among them start to matter past top_k of them.
  if (indexer_) spec.shareable_prefix_tokens = (indexer_->params.top_k + 1) * compress_rate_ - 1;
  return spec;
}

void V4Attention::compress(Backend& backend, const Compressor& compressor, const Tensor& side, KvCache& cache,
                           int layer, const StepContext& step) const {
  CompressorParams params = compressor.params;
  params.position_bias = &compressor.position_bias;
  params.norm_weight = &compressor.norm;
  params.rope = &rope_;
  const int64_t width = params.width();
  backend.compress_kv(cache, layer, backend.slice_columns(side, compressor.kv_column, width),
                      backend.slice_columns(side, compressor.kv_column + width, width), params, step);
}

Tensor V4Attention::forward(Backend& backend, const BlockInput& input, KvCache& cache, int layer,
                            const StepContext& step) const {
  const int64_t num_tokens = input.num_tokens();
  const Tensor q_a_kv = input.linear(q_a_kv_weight_);
  Tensor q_a = backend.slice_columns(q_a_kv, 0, q_lora_rank_);
  const BlockInput q_residual(backend, q_a, std::nullopt, q_a_norm_, norm_eps_);  // read by wq_b and the indexer
  Tensor query = q_residual.linear(q_b_weight_).reshape({num_tokens, num_heads_, head_dim_});
  Tensor kv = backend.slice_columns(q_a_kv, q_lora_rank_, head_dim_).reshape({num_tokens, 1, head_dim_});
  backend.rope_store_kv(query, kv, kv, {&head_ones_, &kv_norm_, norm_eps_}, rope_, cache, layer, step);

  CompressedAttentionParams params;
  params.scale = 1.0f / std::sqrt(static_cast<float>(head_dim_));
  params.sliding_window = sliding_window_;
  params.sinks = &sinks_;
  std::optional<Tensor> selected;
  std::optional<Tensor> side;
  if (compressor_) {
    side = input.linear(side_weight_);
    compress(backend, *compressor_, *side, cache, layer, step);
    params.compress_rate = compress_rate_;
    params.entry_offset = compressor_->params.entry_offset();
  }
  if (indexer_) {
    compress(backend, indexer_->compressor, *side, cache, layer, step);
    Tensor index_query = q_residual.linear(indexer_->query_weight)
                             .reshape({num_tokens, indexer_->num_heads, indexer_->head_dim});
    backend.rope(index_query, rope_, step);
    const Tensor head_weights = backend.slice_columns(*side, indexer_->weights_column, indexer_->num_heads);
    selected = backend.select_compressed(index_query, head_weights, cache, layer, indexer_->params, step);
    params.selected = &*selected;
  }
  Tensor attended = backend.compressed_attention(query, cache, layer, params, step);  // [T, heads, head_dim]
  // Values are the rotated keys: rotating the output back by its query position leaves each entry's
  // contribution a function of the relative distance.
  backend.rope_inverse(attended, rope_, step);
  const Tensor grouped = backend.grouped_linear(
      attended.reshape({num_tokens, o_groups_, num_heads_ * head_dim_ / o_groups_}), o_a_weight_);
  return backend.linear(grouped.reshape({num_tokens, o_groups_ * o_lora_rank_}), o_b_weight_, nullptr);
}

}  // namespace tern
