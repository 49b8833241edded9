#include "model/layers/mla_attention.h"

#include <cstring>

#include "model/layers/cached_attention.h"

namespace tern {

namespace {

// Splits kv_b_proj [heads * (nope + v), kv_lora] into W_UK transposed ([heads, kv_lora, nope]) and W_UV
// ([heads, v, kv_lora]) on the host; both are exact re-layouts of the checkpoint's elements (of their float32
// dequantization where kv_b_proj is block-quantized: the blocks do not survive the transposition).
std::pair<Tensor, Tensor> split_kv_up(WeightLoader& weights, const std::string& name, const MlaConfig& c) {
  const int64_t nope = c.qk_nope_head_dim, v = c.v_head_dim, rank = c.kv_lora_rank, heads = c.num_heads;
  std::vector<float> dequantized;
  const TensorInfo info = weights.plain_info(name, {heads * (nope + v), rank}, dequantized);
  const size_t element = dtype_size(info.dtype);
  auto source = [&](int64_t row, int64_t column) { return info.data + (row * rank + column) * element; };
  std::vector<std::byte> key(heads * rank * nope * element), value(heads * v * rank * element);
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t r = 0; r < rank; ++r) {
      for (int64_t d = 0; d < nope; ++d) {
        std::memcpy(key.data() + ((h * rank + r) * nope + d) * element, source(h * (nope + v) + d, r), element);
      }
    }
    for (int64_t d = 0; d < v; ++d) {
      std::memcpy(value.data() + (h * v + d) * rank * element, source(h * (nope + v) + nope + d, 0), rank * element);
    }
  }
  auto load = [&](std::vector<std::byte>& bytes, std::vector<int64_t> shape) {
    TensorInfo part = info;
    part.shape = std::move(shape);
    part.data = bytes.data();
    part.size_bytes = bytes.size();
    const TensorInfo* parts = &part;
    return weights.load_parts({&parts, 1});
  };
  return {load(key, {heads, rank, nope}), load(value, {heads, v, rank})};
}

}  // namespace

MlaAttention::MlaAttention(WeightLoader& weights, const std::string& prefix, const MlaConfig& config,
                           const RopeTable& rope)
    : config_(config), rope_(rope) {
  const int64_t hidden = config.hidden_size;
  const int64_t q_width = config.num_heads * (config.qk_nope_head_dim + config.qk_rope_head_dim);
  WeightLoader linear = weights.linear_weights();
  if (config.q_lora_rank > 0) {
    q_a_weight_ = linear.load(prefix + ".q_a_proj.weight", {config.q_lora_rank, hidden});
    q_a_norm_ = weights.load(prefix + ".q_a_layernorm.weight", {config.q_lora_rank});
    q_b_weight_ = linear.load(prefix + ".q_b_proj.weight", {q_width, config.q_lora_rank});
  } else {
    q_b_weight_ = linear.load(prefix + ".q_proj.weight", {q_width, hidden});
  }
  kv_a_weight_ = linear.load(prefix + ".kv_a_proj_with_mqa.weight", {config.kv_lora_rank + config.qk_rope_head_dim, hidden});
  kv_a_norm_ = weights.load(prefix + ".kv_a_layernorm.weight", {config.kv_lora_rank});
  std::tie(absorbed_key_, value_up_) = split_kv_up(linear, prefix + ".kv_b_proj.weight", config);
  output_weight_ = linear.load(prefix + ".o_proj.weight", {hidden, config.num_heads * config.v_head_dim});
}

Tensor MlaAttention::forward(Backend& backend, const BlockInput& input, KvCache& cache, int layer,
                             const StepContext& step) const {
  const Tensor& x = input.normalized();  // read by the query and the latent projections
  const int64_t num_tokens = x.size(0);
  const int64_t heads = config_.num_heads;
  const int64_t nope = config_.qk_nope_head_dim, rope_dim = config_.qk_rope_head_dim, rank = config_.kv_lora_rank;

  const Tensor q_input = q_a_weight_ ? backend.rms_norm(backend.linear(x, *q_a_weight_, nullptr), *q_a_norm_,
                                                        config_.norm_eps)
                                     : x;
  const Tensor q = backend.linear(q_input, q_b_weight_, nullptr).reshape({num_tokens * heads, nope + rope_dim});
  const Tensor q_nope = backend.slice_columns(q, 0, nope).reshape({num_tokens, heads, nope});
  Tensor q_rope = backend.slice_columns(q, nope, rope_dim).reshape({num_tokens, heads, rope_dim});
  backend.rope(q_rope, rope_, step);
  const Tensor q_latent = backend.grouped_linear(q_nope, absorbed_key_);  // [T, heads, rank]
  const Tensor query = backend.concat_columns(q_latent.reshape({num_tokens * heads, rank}),
                                              q_rope.reshape({num_tokens * heads, rope_dim}))
                           .reshape({num_tokens, heads, rank + rope_dim});

  const Tensor kv_a = backend.linear(x, kv_a_weight_, nullptr);
  const Tensor latent = backend.rms_norm(backend.slice_columns(kv_a, 0, rank), kv_a_norm_, config_.norm_eps);
  Tensor k_rope = backend.slice_columns(kv_a, rank, rope_dim).reshape({num_tokens, 1, rope_dim});
  backend.rope(k_rope, rope_, step);
  const Tensor key = backend.concat_columns(latent, k_rope.reshape({num_tokens, rope_dim}))
                         .reshape({num_tokens, 1, rank + rope_dim});
  backend.store_kv(cache, layer, key, key, step);

  AttentionParams params;
  params.scale = config_.softmax_scale;
  params.values_from_keys = rank;
  const Tensor attended_latent = cached_attention(backend, query, cache, layer, params, step);  // [T, heads, rank]
  const Tensor attended = backend.grouped_linear(attended_latent, value_up_);           // [T, heads, v]
  return backend.linear(attended.reshape({num_tokens, heads * config_.v_head_dim}), output_weight_, nullptr);
}

}  // namespace tern
