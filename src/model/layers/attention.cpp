#include "model/layers/attention.h"

#include <cmath>

#include "core/error.h"
#include "model/layers/cached_attention.h"

namespace tern {

namespace {

// Under decode context parallelism every rank runs every head over its share of the tokens: the weights are whole.
WeightLoader attention_weights(WeightLoader& weights, const std::string& prefix, const AttentionConfig& config) {
  if (!weights.backend().decode_context_parallel()) return weights;
  if (config.sinks) {
    fail("decode context parallelism: {} has attention sinks (gpt-oss), whose softmax mass no rank's share of the "
         "tokens holds; not supported", prefix);
  }
  if (config.sliding_window > 0) {
    fail("decode context parallelism: {} is a sliding-window layer ({} tokens); not supported", prefix,
         config.sliding_window);
  }
  return weights.replicated();
}

}  // namespace

GqaAttention::GqaAttention(WeightLoader& checkpoint_weights, const std::string& prefix, const AttentionConfig& config,
                           const RopeTable& rope)
    : config_(config), rope_(rope), context_parallel_(checkpoint_weights.backend().decode_context_parallel()) {
  WeightLoader weights = attention_weights(checkpoint_weights, prefix, config);
  // Tensor parallelism splits the heads: q/k/v are column-parallel, o_proj row-parallel (an all-reduce follows).
  // With fewer key/value heads than ranks, each rank keeps a copy of the one its query heads read (vLLM does the
  // same): query heads are split in order, so rank r's all belong to key/value head r * kv_heads / ranks.
  const TensorParallelShard& shard = weights.shard();
  config_.num_heads = weights.shard_count(config.num_heads, prefix + " attention heads");
  int64_t first_kv_head = 0;
  if (config.num_kv_heads >= shard.size) {
    config_.num_kv_heads = weights.shard_count(config.num_kv_heads, prefix + " key/value heads");
    first_kv_head = shard.rank * config_.num_kv_heads;
  } else {
    if (shard.size % config.num_kv_heads != 0) {
      fail("tensor parallelism: {} key/value heads ({}) can neither be split over nor replicated on {} ranks", prefix,
           config.num_kv_heads, shard.size);
    }
    config_.num_kv_heads = 1;
    first_kv_head = shard.rank * config.num_kv_heads / shard.size;
  }
  const int64_t q_rows = config.num_heads * config.head_dim;
  const int64_t kv_rows = config.num_kv_heads * config.head_dim;
  const int64_t hidden = config.hidden_size;
  const int64_t kv_begin = first_kv_head * config.head_dim;
  const int64_t kv_count = config_.num_kv_heads * config.head_dim;
  const auto qkv_ranges = [&](const std::string& kind, std::vector<int64_t> q_shape, std::vector<int64_t> kv_shape) {
    return std::vector<RowRange>{weights.row_shard(prefix + ".q_proj." + kind, q_shape),
                                 {prefix + ".k_proj." + kind, kv_shape, kv_begin, kv_count},
                                 {prefix + ".v_proj." + kind, kv_shape, kv_begin, kv_count}};
  };
  WeightLoader linear = weights.linear_weights();
  const int64_t input = config.input_size > 0 ? config.input_size : hidden;
  qkv_weight_ = linear.load_row_ranges(qkv_ranges("weight", {q_rows, input}, {kv_rows, input}));
  if (config.qkv_bias) qkv_bias_ = weights.load_row_ranges(qkv_ranges("bias", {q_rows}, {kv_rows}));
  output_weight_ = linear.load_column_shard(prefix + ".o_proj.weight", {hidden, q_rows});
  // The bias joins the sum once: rank 0 adds it before the all-reduce.
  if (config.output_bias && weights.shard().rank == 0) output_bias_ = weights.load(prefix + ".o_proj.bias", {hidden});
  const auto kv_cache_scale = [&](const std::string& name) {
    const float scale = weights.scalar(name).value_or(1.0f);
    if (!(scale > 0.0f && std::isfinite(scale))) {
      fail("{}: a KV cache scale must be positive and finite, got {}", name, scale);
    }
    return scale;
  };
  key_scale_ = kv_cache_scale(prefix + ".k_scale");
  value_scale_ = kv_cache_scale(prefix + ".v_scale");
  if (config.qk_norm) {
    q_norm_ = weights.load(prefix + ".q_norm.weight", {config.head_dim});
    k_norm_ = weights.load(prefix + ".k_norm.weight", {config.head_dim});
  }
  if (config.sinks) sinks_ = weights.load_row_shards({{prefix + ".sinks", {config.num_heads}}});
}

Tensor GqaAttention::forward(Backend& backend, const BlockInput& input, KvCache& cache, int layer,
                             const StepContext& step) const {
  const int64_t num_tokens = input.num_tokens();
  const int64_t head_dim = config_.head_dim;
  const int64_t q_width = config_.num_heads * head_dim;
  const Tensor* qkv_bias = qkv_bias_ ? &*qkv_bias_ : nullptr;
  const QkvHeads heads{config_.num_heads, config_.num_kv_heads, head_dim,
                       {q_norm_ ? &*q_norm_ : nullptr, k_norm_ ? &*k_norm_ : nullptr, config_.norm_eps}};
  const Tensor q = input.linear_rope_store_kv(qkv_weight_, qkv_bias, heads, rope_, cache, layer, step);
  AttentionParams params;
  params.scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  params.sliding_window = config_.sliding_window;
  params.sinks = sinks_ ? &*sinks_ : nullptr;
  const Tensor attended = cached_attention(backend, q, cache, layer, params, step);
  // Every context-parallel rank holds every head's output: its o_proj is whole and needs no sum over the ranks.
  if (context_parallel_) {
    return backend.linear(attended.reshape({num_tokens, q_width}), output_weight_,
                          output_bias_ ? &*output_bias_ : nullptr);
  }
  return backend.linear_all_reduce(attended.reshape({num_tokens, q_width}), output_weight_,
                                   output_bias_ ? &*output_bias_ : nullptr);
}

}  // namespace tern
