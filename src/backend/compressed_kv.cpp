#include "backend/compressed_kv.h"

#include "backend/kv_cache.h"
#include "core/error.h"
#include "core/tensor_info.h"

namespace tern {

const Tensor& compressed_layer_states(const KvCache& cache, int layer, int64_t end, const char* op) {
  if (layer < 0 || layer >= static_cast<int>(cache.states.size())) fail("{}: the cache has no layer {}", op, layer);
  const Tensor& states = cache.states[layer];
  const int64_t state_dim = states.shape.size() == 2 ? states.shape[1] : 0;
  if (end > state_dim) fail("{}: layer {} keeps {} state floats per token, {} needed", op, layer, state_dim, end);
  return states;
}

void check_hyper_mix(const Tensor& mixes, const Tensor& base, const Tensor& scale, const HyperMixParams& params) {
  const int64_t n = params.num_streams;
  const int64_t width = mixes.shape.empty() ? 0 : mixes.size(-1);
  const bool head = width == n;
  if (n <= 0 || (!head && width != (2 + n) * n)) {
    fail("hyper_mix: {} mixes per token fit neither {} streams' head ({}) nor their layer mix ({})", width, n, n,
         (2 + n) * n);
  }
  if (base.numel() != width || scale.numel() != (head ? 1 : 3)) {
    fail("hyper_mix: base of {} and scale of {} do not fit {} mixes", base.numel(), scale.numel(), width);
  }
}

void check_hyper_collapse(const Tensor& streams, const Tensor& mix) {
  if (streams.shape.size() != 3) fail("hyper_collapse: streams must be [T, N, H], got {}", shape_string(streams.shape));
  const int64_t mix_width = mix.shape.empty() ? 0 : mix.size(-1);
  if (mix.numel() != streams.size(0) * mix_width || mix_width < streams.size(1)) {
    fail("hyper_collapse: mix {} does not fit streams {}", shape_string(mix.shape), shape_string(streams.shape));
  }
}

void check_hyper_mix_collapse(const Tensor& streams, const Tensor& mixes, const Tensor& base, const Tensor& scale,
                              const HyperMixParams& params) {
  check_hyper_mix(mixes, base, scale, params);
  check_hyper_collapse(streams, mixes);
  if (streams.size(1) != params.num_streams) {
    fail("hyper_mix_collapse: mixes of {} streams for streams {}", params.num_streams, shape_string(streams.shape));
  }
}

void check_hyper_expand(const Tensor& streams, const Tensor& block_out, const Tensor& mix) {
  if (streams.shape.size() != 3) fail("hyper_expand: streams must be [T, N, H], got {}", shape_string(streams.shape));
  const int64_t num_tokens = streams.size(0), n = streams.size(1), hidden = streams.size(2);
  if (block_out.numel() != num_tokens * hidden || mix.numel() != num_tokens * (2 + n) * n) {
    fail("hyper_expand: block output {} or mix {} does not fit streams {}", shape_string(block_out.shape),
         shape_string(mix.shape), shape_string(streams.shape));
  }
}

void check_compress_kv(const Tensor& kv, const Tensor& gate, const CompressorParams& params, int64_t num_tokens) {
  const int64_t rate = params.compress_rate, dim = params.entry_dim, width = params.width();
  if (rate <= 0 || dim <= 0) fail("compress_kv: compress rate {} and entry dim {} must be positive", rate, dim);
  if (kv.numel() != num_tokens * width || gate.numel() != num_tokens * width) {
    fail("compress_kv: kv {} and gate {} must be [{}, {}]", shape_string(kv.shape), shape_string(gate.shape),
         num_tokens, width);
  }
  if (!params.position_bias || params.position_bias->numel() != rate * width || !params.norm_weight ||
      params.norm_weight->numel() != dim || !params.rope) {
    fail("compress_kv: needs a [{}, {}] position bias, a [{}] norm weight and a rope table", rate, width, dim);
  }
}

void check_compressed_attention(const Tensor& query, const KvCache& cache, int layer,
                                const CompressedAttentionParams& params) {
  if (query.shape.size() != 3) {
    fail("compressed_attention: query must be [T, heads, dim], got {}", shape_string(query.shape));
  }
  const int64_t num_tokens = query.size(0), num_heads = query.size(1), dim = query.size(2);
  if (layer < 0 || layer >= static_cast<int>(cache.layers.size())) {
    fail("compressed_attention: layer {} not in the cache", layer);
  }
  const KvLayerSpec& spec = cache.layers[layer];
  if (spec.num_kv_heads != 1 || spec.key_dim != dim) {
    fail("compressed_attention: layer {} caches {} heads x {}, expected one shared head of {}", layer,
         spec.num_kv_heads, spec.key_dim, dim);
  }
  if (params.sinks && params.sinks->numel() != num_heads) {
    fail("compressed_attention: {} sinks for {} heads", params.sinks->numel(), num_heads);
  }
  const int64_t top_k = params.selected ? params.selected->size(-1) : 0;
  if (params.selected && (params.selected->dtype != DType::I32 || params.selected->numel() != num_tokens * top_k)) {
    fail("compressed_attention: selected entries must be int32 [{}, k]", num_tokens);
  }
}

}  // namespace tern
