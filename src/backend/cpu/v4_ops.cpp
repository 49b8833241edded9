// The CPU reference of DeepSeek-V4's ops: mHC stream mixing (Sinkhorn-Knopp), the CSA / HCA compressors, the
// Lightning Indexer's top-k and attention over a sliding window plus compressed entries. Float32 like
// transformers' float32 forward; long dot products accumulate in double.
#include "backend/cpu/v4_ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "backend/cpu/host_tensor.h"
#include "backend/cpu/kv_rows.h"
#include "core/error.h"

namespace tern::cpu {

namespace {

std::vector<float> host_f32(const Tensor& t) {
  std::vector<float> out(t.numel());
  convert_to_f32(t.dtype, t.data, out.data(), out.size());
  return out;
}

void require_f32(const Tensor& t, const char* op, const char* what) {
  if (t.dtype != DType::F32) fail("{}: {} must be float32, got {}", op, what, dtype_name(t.dtype));
}

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

// Where each new token of a batch lives: its sequence and its position in it.
struct TokenPlace {
  const SequenceChunk* sequence;
  int64_t position;
};

std::vector<TokenPlace> token_places(const ForwardBatch& batch) {
  std::vector<TokenPlace> places;
  places.reserve(batch.token_ids.size());
  for (const auto& seq : batch.sequences) {
    for (int32_t i = 0; i < seq.num_new_tokens; ++i) places.push_back({&seq, seq.num_cached_tokens + i});
  }
  if (places.size() != batch.token_ids.size()) {
    fail("forward batch: sequences hold {} new tokens but the batch has {} token ids", places.size(),
         batch.token_ids.size());
  }
  return places;
}

// The slot of `position` in the block table of layer `layer`'s group.
int64_t slot_of(const SequenceChunk& seq, int64_t position, const KvCache& cache, int layer) {
  const int64_t block_size = cache.block_size;
  const auto& table = seq.block_tables.at(cache.layer_group[layer]);
  const int64_t block = position / block_size;
  if (block >= static_cast<int64_t>(table.size()) || table[block] < 0) {
    fail("kv cache: position {} of layer {} lies past or before the sequence's {} blocks of {}", position, layer,
         table.size(), block_size);
  }
  return static_cast<int64_t>(table[block]) * block_size + position % block_size;
}

// Checks up front that every position up to each token's own has a block, so the parallel loops below, which
// read only such positions, cannot fail (an exception must not leave an OpenMP region).
void check_blocks(const std::vector<TokenPlace>& places, const KvCache& cache, int layer) {
  for (const auto& place : places) slot_of(*place.sequence, place.position, cache, layer);
}

// Softmax over the first `n` logits in place (max-subtracted, as torch does).
void softmax_in_place(float* logits, int64_t n) {
  const float max_logit = *std::max_element(logits, logits + n);
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum += logits[i] = std::exp(logits[i] - max_logit);
  for (int64_t i = 0; i < n; ++i) logits[i] /= sum;
}

// The Sinkhorn-Knopp projection of transformers' DeepseekV4HyperConnection: softmax rows plus eps, then columns,
// then (iters - 1) rounds of rows and columns, each divided by its sum plus eps.
void sinkhorn(float* comb, int64_t n, int64_t iters, float eps) {
  auto normalize_columns = [&] {
    for (int64_t c = 0; c < n; ++c) {
      float sum = 0.0f;
      for (int64_t r = 0; r < n; ++r) sum += comb[r * n + c];
      for (int64_t r = 0; r < n; ++r) comb[r * n + c] /= sum + eps;
    }
  };
  auto normalize_rows = [&] {
    for (int64_t r = 0; r < n; ++r) {
      float sum = 0.0f;
      for (int64_t c = 0; c < n; ++c) sum += comb[r * n + c];
      for (int64_t c = 0; c < n; ++c) comb[r * n + c] /= sum + eps;
    }
  };
  for (int64_t r = 0; r < n; ++r) {
    softmax_in_place(comb + r * n, n);
    for (int64_t c = 0; c < n; ++c) comb[r * n + c] += eps;
  }
  normalize_columns();
  for (int64_t i = 1; i < iters; ++i) {
    normalize_rows();
    normalize_columns();
  }
}

}  // namespace

Tensor hyper_mix(const Tensor& mixes, const Tensor& base, const Tensor& scale, const HyperMixParams& params) {
  require_f32(mixes, "hyper_mix", "mixes");
  check_hyper_mix(mixes, base, scale, params);
  const int64_t n = params.num_streams;
  const int64_t width = mixes.size(-1);
  const bool head = width == n;
  const std::vector<float> b = host_f32(base), s = host_f32(scale);
  const int64_t num_rows = mixes.numel() / width;
  Tensor out = host_tensor(DType::F32, {num_rows, width});
  for (int64_t t = 0; t < num_rows; ++t) {
    const float* m = mixes.ptr<float>() + t * width;
    float* o = out.ptr<float>() + t * width;
    for (int64_t i = 0; i < n; ++i) o[i] = sigmoid(m[i] * s[0] + b[i]) + params.eps;
    if (head) continue;
    for (int64_t i = n; i < 2 * n; ++i) o[i] = 2.0f * sigmoid(m[i] * s[1] + b[i]);
    for (int64_t i = 2 * n; i < width; ++i) o[i] = m[i] * s[2] + b[i];
    sinkhorn(o + 2 * n, n, params.sinkhorn_iters, params.eps);
  }
  return out;
}

Tensor hyper_collapse(const Tensor& streams, const Tensor& mix) {
  require_f32(streams, "hyper_collapse", "streams");
  require_f32(mix, "hyper_collapse", "mix");
  check_hyper_collapse(streams, mix);
  const int64_t num_tokens = streams.size(0), n = streams.size(1), hidden = streams.size(2);
  const int64_t mix_width = mix.size(-1);
  Tensor out = host_tensor(DType::F32, {num_tokens, hidden});
  for (int64_t t = 0; t < num_tokens; ++t) {
    const float* w = mix.ptr<float>() + t * mix_width;
    const float* x = streams.ptr<float>() + t * n * hidden;
    float* o = out.ptr<float>() + t * hidden;
    for (int64_t d = 0; d < hidden; ++d) {
      float sum = 0.0f;
      for (int64_t i = 0; i < n; ++i) sum += w[i] * x[i * hidden + d];
      o[d] = sum;
    }
  }
  return out;
}

Tensor hyper_expand(const Tensor& streams, const Tensor& block_out, const Tensor& mix) {
  require_f32(streams, "hyper_expand", "streams");
  require_f32(block_out, "hyper_expand", "block output");
  check_hyper_expand(streams, block_out, mix);
  const int64_t num_tokens = streams.size(0), n = streams.size(1), hidden = streams.size(2);
  const int64_t mix_width = (2 + n) * n;
  Tensor out = host_tensor(DType::F32, streams.shape);
  for (int64_t t = 0; t < num_tokens; ++t) {
    const float* post = mix.ptr<float>() + t * mix_width + n;
    const float* comb = post + n;  // comb[j * n + k]: weight of input stream j in output stream k
    const float* x = streams.ptr<float>() + t * n * hidden;
    const float* y = block_out.ptr<float>() + t * hidden;
    float* o = out.ptr<float>() + t * n * hidden;
    for (int64_t k = 0; k < n; ++k) {
      for (int64_t d = 0; d < hidden; ++d) {
        float mixed = 0.0f;
        for (int64_t j = 0; j < n; ++j) mixed += comb[j * n + k] * x[j * hidden + d];
        o[k * hidden + d] = post[k] * y[d] + mixed;
      }
    }
  }
  return out;
}

void compress_kv(KvCache& cache, int layer, const Tensor& kv, const Tensor& gate, const CompressorParams& params,
                 const ForwardBatch& batch) {
  require_f32(kv, "compress_kv", "kv");
  require_f32(gate, "compress_kv", "gate");
  const int64_t rate = params.compress_rate, dim = params.entry_dim, width = params.width();
  const auto places = token_places(batch);
  const int64_t num_tokens = static_cast<int64_t>(places.size());
  check_compress_kv(kv, gate, params, num_tokens);
  const Tensor& states = compressed_layer_states(cache, layer, params.state_offset + params.state_dim(), "compress_kv");
  const int64_t state_dim = states.shape[1];
  float* rows = states.ptr<float>();
  auto region = [&](const TokenPlace& place, int64_t position) {
    return rows + slot_of(*place.sequence, position, cache, layer) * state_dim + params.state_offset;
  };
  const std::vector<float> bias = host_f32(*params.position_bias);
  const std::vector<float> norm = host_f32(*params.norm_weight);

  // Every new token's kv and biased gate first: the windows closed below may span tokens of this step.
  std::vector<int64_t> closing;
  for (int64_t t = 0; t < num_tokens; ++t) {
    const int64_t pos = places[t].position;
    float* row = region(places[t], pos);
    std::memcpy(row, kv.ptr<float>() + t * width, width * sizeof(float));
    const float* g = gate.ptr<float>() + t * width;
    const float* b = bias.data() + (pos % rate) * width;
    for (int64_t f = 0; f < width; ++f) row[width + f] = g[f] + b[f];
    if ((pos + 1) % rate == 0) closing.push_back(t);
  }
  if (closing.empty()) return;

  // Entry w pools, per feature, the slots of window w (second halves when overlapping) and, when overlapping,
  // window w-1's first halves, with softmax weights over their gates.
  const int64_t num_entries = static_cast<int64_t>(closing.size());
  Tensor entries = host_tensor(DType::F32, {num_entries, 1, dim});
  std::vector<int32_t> window_starts(num_entries);
  std::vector<const float*> sources;
  std::vector<int64_t> feature_offsets;
  std::vector<float> weights;
  for (int64_t e = 0; e < num_entries; ++e) {
    const TokenPlace& place = places[closing[e]];
    const int64_t start = place.position + 1 - rate;
    window_starts[e] = static_cast<int32_t>(start);
    sources.clear();
    feature_offsets.clear();
    if (params.overlapping && start >= rate) {
      for (int64_t j = 0; j < rate; ++j) {
        sources.push_back(region(place, start - rate + j));
        feature_offsets.push_back(0);
      }
    }
    for (int64_t j = 0; j < rate; ++j) {
      sources.push_back(region(place, start + j));
      feature_offsets.push_back(params.overlapping ? dim : 0);
    }
    const int64_t num_sources = static_cast<int64_t>(sources.size());
    weights.resize(num_sources);
    float* entry = entries.ptr<float>() + e * dim;
    for (int64_t d = 0; d < dim; ++d) {
      for (int64_t s = 0; s < num_sources; ++s) weights[s] = sources[s][width + feature_offsets[s] + d];
      softmax_in_place(weights.data(), num_sources);
      float pooled = 0.0f;
      for (int64_t s = 0; s < num_sources; ++s) pooled += sources[s][feature_offsets[s] + d] * weights[s];
      entry[d] = pooled;
    }
    double sum_squares = 0.0;
    for (int64_t d = 0; d < dim; ++d) sum_squares += static_cast<double>(entry[d]) * entry[d];
    const float inv_rms = static_cast<float>(1.0 / std::sqrt(sum_squares / dim + params.norm_eps));
    for (int64_t d = 0; d < dim; ++d) entry[d] = norm[d] * (entry[d] * inv_rms);
  }
  rope_at(entries, *params.rope, window_starts, false);
  for (int64_t e = 0; e < num_entries; ++e) {
    const TokenPlace& place = places[closing[e]];
    std::memcpy(region(place, place.position) + 2 * width, entries.ptr<float>() + e * dim, dim * sizeof(float));
  }
}

Tensor select_compressed(const Tensor& query, const Tensor& head_weights, const KvCache& cache, int layer,
                         const IndexerParams& params, const ForwardBatch& batch) {
  require_f32(query, "select_compressed", "query");
  require_f32(head_weights, "select_compressed", "head weights");
  const auto places = token_places(batch);
  const int64_t num_tokens = query.size(0), num_heads = query.size(1), dim = query.size(2);
  const int64_t rate = params.compress_rate, top_k = params.top_k;
  if (num_tokens != static_cast<int64_t>(places.size()) || head_weights.numel() != num_tokens * num_heads) {
    fail("select_compressed: query {} and head weights {} do not fit {} tokens", shape_string(query.shape),
         shape_string(head_weights.shape), places.size());
  }
  if (rate <= 0 || top_k <= 0) fail("select_compressed: compress rate {} and top_k {} must be positive", rate, top_k);
  const Tensor& states = compressed_layer_states(cache, layer, params.entry_offset + dim, "select_compressed");
  const int64_t state_dim = states.shape[1];
  check_blocks(places, cache, layer);
  Tensor out = host_tensor(DType::I32, {num_tokens, top_k});
  std::fill_n(out.ptr<int32_t>(), out.numel(), -1);
#pragma omp parallel
  {
    std::vector<float> scores;
    std::vector<std::pair<float, int64_t>> queue;
#pragma omp for schedule(dynamic, 4)
    for (int64_t t = 0; t < num_tokens; ++t) {
      const int64_t num_visible = (places[t].position + 1) / rate;
      scores.assign(num_visible, 0.0f);
      const float* q = query.ptr<float>() + t * num_heads * dim;
      const float* w = head_weights.ptr<float>() + t * num_heads;
      for (int64_t e = 0; e < num_visible; ++e) {
        const int64_t slot = slot_of(*places[t].sequence, (e + 1) * rate - 1, cache, layer);
        const float* key = states.ptr<float>() + slot * state_dim + params.entry_offset;
        float score = 0.0f;
        for (int64_t h = 0; h < num_heads; ++h) {
          double dot = 0.0;
          for (int64_t d = 0; d < dim; ++d) dot += static_cast<double>(q[h * dim + d]) * key[d];
          const float relu = dot > 0.0 ? static_cast<float>(dot) : 0.0f;
          score += relu * params.softmax_scale * (w[h] * params.weights_scale);
        }
        scores[e] = score;
      }
      // Ties are common (every head's relu at 0), and there is no canonical order among them: they are broken as
      // transformers' generate breaks them, which is what the goldens are. It runs torch.topk (CPU) over a row of
      // every entry its cache holds, those of open windows at -inf, and torch's choice among ties depends on the
      // row's length: the prompt's entries for the prompt's tokens (one prefill pass), the entries up to the token
      // itself for generated ones. The row is therefore a function of the position and the prompt length, never
      // of how the engine chunks the sequence, so chunked prefill and preemption give transformers' tokens. (An
      // order fixed by value and index, like a radix select's, would not depend on the prompt but misses the
      // goldens: it was tried and dropped.) Without a known prompt length, the step's chunk counts as the prompt.
      const SequenceChunk& seq = *places[t].sequence;
      const int64_t chunk_end = static_cast<int64_t>(seq.num_cached_tokens) + seq.num_new_tokens;
      const int64_t prompt_len = seq.num_prompt_tokens > 0 ? seq.num_prompt_tokens : chunk_end;
      const int64_t num_entries = std::max<int64_t>(places[t].position + 1, prompt_len) / rate;
      queue.resize(num_entries);
      for (int64_t e = 0; e < num_entries; ++e) {
        queue[e] = {e < num_visible ? scores[e] : -std::numeric_limits<float>::infinity(), e};
      }
      const int64_t keep = std::min(top_k, num_entries);
      if (keep == 0) continue;
      auto larger = [](const std::pair<float, int64_t>& x, const std::pair<float, int64_t>& y) {
        return (std::isnan(x.first) && !std::isnan(y.first)) || x.first > y.first;
      };
      if (keep * 64 <= num_entries) {
        std::partial_sort(queue.begin(), queue.begin() + keep, queue.end(), larger);
      } else {
        std::nth_element(queue.begin(), queue.begin() + keep - 1, queue.end(), larger);
      }
      int32_t* chosen = out.ptr<int32_t>() + t * top_k;
      for (int64_t i = 0, n = 0; i < keep; ++i) {
        if (queue[i].second < num_visible) chosen[n++] = static_cast<int32_t>(queue[i].second);
      }
    }
  }
  return out;
}

Tensor compressed_attention(const Tensor& query, const KvCache& cache, int layer,
                            const CompressedAttentionParams& params, const ForwardBatch& batch) {
  require_f32(query, "compressed_attention", "query");
  check_compressed_attention(query, cache, layer, params);
  const auto places = token_places(batch);
  const int64_t num_tokens = query.size(0), num_heads = query.size(1), dim = query.size(2);
  if (num_tokens != static_cast<int64_t>(places.size())) {
    fail("compressed_attention: query of {} tokens for a batch of {}", num_tokens, places.size());
  }
  const std::vector<float> sinks = params.sinks ? host_f32(*params.sinks) : std::vector<float>{};
  const int64_t rate = params.compress_rate;
  const float* states = nullptr;
  int64_t state_dim = 0;
  if (rate > 0) {
    const Tensor& layer_state =
        compressed_layer_states(cache, layer, params.entry_offset + dim, "compressed_attention");
    states = layer_state.ptr<float>();
    state_dim = layer_state.shape[1];
  }
  const int64_t top_k = params.selected ? params.selected->size(-1) : 0;
  check_blocks(places, cache, layer);
  for (int64_t t = 0; params.selected && t < num_tokens; ++t) {
    const int64_t num_closed = rate > 0 ? (places[t].position + 1) / rate : 0;
    for (int64_t i = 0; i < top_k; ++i) {
      const int32_t entry = params.selected->ptr<int32_t>()[t * top_k + i];
      if (entry >= num_closed) {
        fail("compressed_attention: entry {} selected for position {}, which sees only {} closed windows", entry,
             places[t].position, num_closed);
      }
    }
  }
  const Tensor& keys = cache.keys[layer];
  const float key_scale = cache.layers[layer].key_scale;
  Tensor out = host_tensor(DType::F32, {num_tokens, num_heads, dim});

#pragma omp parallel
  {
    std::vector<const float*> candidates;
    std::vector<float> window;  // the window's keys, decoded from an FP8 cache
    std::vector<float> scores;
    std::vector<double> acc(dim);
#pragma omp for schedule(dynamic, 2)
    for (int64_t t = 0; t < num_tokens; ++t) {
      const SequenceChunk& seq = *places[t].sequence;
      const int64_t pos = places[t].position;
      candidates.clear();
      const int64_t first = params.sliding_window > 0 ? std::max<int64_t>(0, pos - params.sliding_window + 1) : 0;
      window.resize((pos - first + 1) * dim);
      for (int64_t j = first; j <= pos; ++j) {
        candidates.push_back(
            kv_values(keys, slot_of(seq, j, cache, layer) * dim, dim, key_scale, window.data() + (j - first) * dim));
      }
      if (rate > 0) {
        const int64_t num_closed = (pos + 1) / rate;
        auto add_entry = [&](int64_t e) {
          const int64_t slot = slot_of(seq, (e + 1) * rate - 1, cache, layer);
          candidates.push_back(states + slot * state_dim + params.entry_offset);
        };
        if (params.selected) {
          const int32_t* chosen = params.selected->ptr<int32_t>() + t * top_k;
          for (int64_t i = 0; i < top_k; ++i) {
            if (chosen[i] >= 0) add_entry(chosen[i]);
          }
        } else {
          for (int64_t e = 0; e < num_closed; ++e) add_entry(e);
        }
      }
      const int64_t num_candidates = static_cast<int64_t>(candidates.size());
      scores.resize(num_candidates);
      for (int64_t h = 0; h < num_heads; ++h) {
        const float* q = query.ptr<float>() + (t * num_heads + h) * dim;
        float max_score = params.sinks ? sinks[h] : -std::numeric_limits<float>::infinity();
        for (int64_t c = 0; c < num_candidates; ++c) {
          double dot = 0.0;
          for (int64_t d = 0; d < dim; ++d) dot += static_cast<double>(q[d]) * candidates[c][d];
          scores[c] = static_cast<float>(dot * params.scale);
          max_score = std::max(max_score, scores[c]);
        }
        float denominator = params.sinks ? std::exp(sinks[h] - max_score) : 0.0f;
        for (float& score : scores) {
          score = std::exp(score - max_score);
          denominator += score;
        }
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t c = 0; c < num_candidates; ++c) {
          const double p = scores[c] / denominator;
          for (int64_t d = 0; d < dim; ++d) acc[d] += p * candidates[c][d];
        }
        float* o = out.ptr<float>() + (t * num_heads + h) * dim;
        for (int64_t d = 0; d < dim; ++d) o[d] = static_cast<float>(acc[d]);
      }
    }
  }
  return out;
}

}  // namespace tern::cpu
