#include <stdexcept>
#include <string>

#include "common/device_math.cuh"
#include "v4/compressed_kv.h"

namespace tern::kernels {

namespace {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;

__device__ __forceinline__ int64_t token_slot(const V4Tokens& tokens, int token, int position) {
  return v4::paged_slot(tokens.block_tables, tokens.block_table_offsets[tokens.token_seq[token]], position,
                        tokens.block_size);
}

// The block's sum (Max = false) or maximum of one value per thread; every thread gets it. `scratch` holds kWarps.
template <bool Max>
__device__ float block_reduce(float v, float* scratch) {
  v = Max ? warp_max(v) : warp_sum(v);
  __syncthreads();  // the scratch may still be read from the previous reduction
  if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = v;
  __syncthreads();
  float total = scratch[0];
  for (int w = 1; w < kWarps; ++w) total = Max ? fmaxf(total, scratch[w]) : total + scratch[w];
  return total;
}

// ---- compress_kv ----

// One block per token: its kv and its gate plus the position bias of its place in the window.
__global__ void __launch_bounds__(kThreads) compress_rows_kernel(CompressKvParams p) {
  const int t = blockIdx.x;
  const int position = p.tokens.positions[t];
  const int width = p.overlapping ? 2 * p.entry_dim : p.entry_dim;
  float* row = p.states + token_slot(p.tokens, t, position) * p.state_dim + p.state_offset;
  const __nv_bfloat16* kv = p.kv + static_cast<int64_t>(t) * width;
  const __nv_bfloat16* gate = p.gate + static_cast<int64_t>(t) * width;
  const __nv_bfloat16* bias = p.position_bias + static_cast<int64_t>(position % p.compress_rate) * width;
  for (int f = threadIdx.x; f < width; f += blockDim.x) {
    row[f] = __bfloat162float(kv[f]);
    row[width + f] = __bfloat162float(gate[f]) + __bfloat162float(bias[f]);
  }
}

// One block per token; a token that closes a window writes its entry: per feature, the sources' kv under a softmax
// of their gates, then RMS norm and rotation at the window's first position. Reads rows of this step's other tokens,
// so it runs after compress_rows_kernel.
__global__ void __launch_bounds__(kThreads) compress_entries_kernel(CompressKvParams p) {
  extern __shared__ float entry[];  // [entry_dim]
  __shared__ float scratch[kWarps];
  const int t = blockIdx.x;
  const int position = p.tokens.positions[t];
  if ((position + 1) % p.compress_rate != 0) return;
  const int rate = p.compress_rate, dim = p.entry_dim;
  const int width = p.overlapping ? 2 * dim : dim;
  const int start = position + 1 - rate;
  const int num_sources = v4::num_pool_sources(start, rate, p.overlapping);
  const auto source_row = [&](int s, int& feature_offset) {
    const v4::PoolSource source = v4::pool_source(start, s, rate, dim, p.overlapping);
    feature_offset = source.feature_offset;
    return p.states + token_slot(p.tokens, t, source.position) * p.state_dim + p.state_offset;
  };
  float sum_squares = 0.0f;
  for (int d = threadIdx.x; d < dim; d += blockDim.x) {
    int offset = 0;
    float max_gate = -INFINITY;
    for (int s = 0; s < num_sources; ++s) {
      const float* row = source_row(s, offset);
      max_gate = fmaxf(max_gate, row[width + offset + d]);
    }
    float sum = 0.0f;
    for (int s = 0; s < num_sources; ++s) {
      const float* row = source_row(s, offset);
      sum += expf(row[width + offset + d] - max_gate);
    }
    float pooled = 0.0f;
    for (int s = 0; s < num_sources; ++s) {
      const float* row = source_row(s, offset);
      pooled += row[offset + d] * (expf(row[width + offset + d] - max_gate) / sum);
    }
    entry[d] = pooled;
    sum_squares += pooled * pooled;
  }
  sum_squares = block_reduce<false>(sum_squares, scratch);
  const float inv_rms = 1.0f / sqrtf(sum_squares / dim + p.norm_eps);
  for (int d = threadIdx.x; d < dim; d += blockDim.x) {
    entry[d] = __bfloat162float(p.norm_weight[d]) * (entry[d] * inv_rms);
  }
  __syncthreads();
  for (int pair = threadIdx.x; pair < p.rope.rotary_dim / 2; pair += blockDim.x) {
    v4::rotate_pair(entry + p.rope.first_dim, pair, p.rope, static_cast<float>(start), false);
  }
  __syncthreads();
  float* out = p.states + token_slot(p.tokens, t, position) * p.state_dim + p.state_offset + 2 * width;
  for (int d = threadIdx.x; d < dim; d += blockDim.x) out[d] = entry[d];
}

// ---- select_compressed ----

// Shared memory of a block: the token's query and head weights as float, the running top-k, the merged top-k
// being built, and one scored entry per thread.
struct SelectLayout {
  int query, weights, best_score, best_index, next_score, next_index, chunk_score, chunk_index, bytes;
  __host__ __device__ SelectLayout(int num_heads, int head_dim, int top_k) {
    query = 0;
    weights = query + num_heads * head_dim * 4;
    best_score = weights + num_heads * 4;
    best_index = best_score + top_k * 4;
    next_score = best_index + top_k * 4;
    next_index = next_score + top_k * 4;
    chunk_score = next_index + top_k * 4;
    chunk_index = chunk_score + kThreads * 4;
    bytes = chunk_index + kThreads * 4;
  }
};

__global__ void __launch_bounds__(kThreads) select_compressed_kernel(SelectCompressedParams p) {
  extern __shared__ __align__(16) char smem[];
  const SelectLayout layout(p.num_heads, p.head_dim, p.top_k);
  float* query = reinterpret_cast<float*>(smem + layout.query);
  float* weights = reinterpret_cast<float*>(smem + layout.weights);
  float* best_score = reinterpret_cast<float*>(smem + layout.best_score);
  int* best_index = reinterpret_cast<int*>(smem + layout.best_index);
  float* next_score = reinterpret_cast<float*>(smem + layout.next_score);
  int* next_index = reinterpret_cast<int*>(smem + layout.next_index);
  float* chunk_score = reinterpret_cast<float*>(smem + layout.chunk_score);
  int* chunk_index = reinterpret_cast<int*>(smem + layout.chunk_index);

  const int t = blockIdx.x;
  const int query_row = p.num_heads * p.head_dim;
  for (int i = threadIdx.x; i < query_row; i += blockDim.x) {
    query[i] = __bfloat162float(p.query[static_cast<int64_t>(t) * query_row + i]);
  }
  for (int h = threadIdx.x; h < p.num_heads; h += blockDim.x) {
    weights[h] = __bfloat162float(p.head_weights[static_cast<int64_t>(t) * p.num_heads + h]) * p.weights_scale;
  }
  __syncthreads();
  const int num_visible = (p.tokens.positions[t] + 1) / p.compress_rate;
  int num_best = 0;
  for (int base = 0; base < num_visible; base += blockDim.x) {
    const int e = base + threadIdx.x;
    float score = 0.0f;
    if (e < num_visible) {
      const float* key = p.states + token_slot(p.tokens, t, (e + 1) * p.compress_rate - 1) * p.state_dim +
                         p.entry_offset;
      for (int h = 0; h < p.num_heads; ++h) {
        const float* q = query + h * p.head_dim;
        float dot = 0.0f;
        for (int d = 0; d < p.head_dim; ++d) dot += q[d] * key[d];
        score += fmaxf(dot, 0.0f) * p.softmax_scale * weights[h];
      }
    }
    chunk_score[threadIdx.x] = score;
    chunk_index[threadIdx.x] = e < num_visible ? e : -1;
    const bool improves = e < num_visible && (num_best < p.top_k || v4::ranks_ahead(score, e, best_score[p.top_k - 1],
                                                                                     best_index[p.top_k - 1]));
    if (!__syncthreads_or(improves)) continue;
    // Each kept or new entry's rank among all of them is its place in the merged top-k.
    const int num_elements = num_best + blockDim.x;
    for (int i = threadIdx.x; i < num_elements; i += blockDim.x) {
      const float s = i < num_best ? best_score[i] : chunk_score[i - num_best];
      const int index = i < num_best ? best_index[i] : chunk_index[i - num_best];
      if (index < 0) continue;
      int rank = 0;
      for (int j = 0; j < num_elements && rank < p.top_k; ++j) {
        const int other = j < num_best ? best_index[j] : chunk_index[j - num_best];
        const float other_score = j < num_best ? best_score[j] : chunk_score[j - num_best];
        rank += other >= 0 && v4::ranks_ahead(other_score, other, s, index);
      }
      if (rank < p.top_k) {
        next_score[rank] = s;
        next_index[rank] = index;
      }
    }
    num_best = min(p.top_k, num_best + min(static_cast<int>(blockDim.x), num_visible - base));
    __syncthreads();
    for (int i = threadIdx.x; i < num_best; i += blockDim.x) {
      best_score[i] = next_score[i];
      best_index[i] = next_index[i];
    }
    __syncthreads();
  }
  int32_t* out = p.selected + static_cast<int64_t>(t) * p.top_k;
  for (int i = threadIdx.x; i < p.top_k; i += blockDim.x) out[i] = i < num_best ? best_index[i] : -1;
}

// ---- compressed_attention ----

constexpr int kMaxDimsPerThread = kMaxCompressedHeadDim / kThreads;

// Grid (tokens, heads). Candidates are numbered: the window's keys first, then the compressed entries (selected
// ones, or every closed window); a block scores kThreads of them at a time, a thread each, and folds them into
// its running softmax, each thread owning head dims d = threadIdx.x + i * kThreads of the output.
__global__ void __launch_bounds__(kThreads) compressed_attention_kernel(CompressedAttentionParams p) {
  __shared__ float query[kMaxCompressedHeadDim];
  __shared__ float probability[kThreads];
  __shared__ const void* source[kThreads];  // the candidate's vector: bf16 key or float32 entry
  __shared__ bool is_entry[kThreads];
  __shared__ float scratch[kWarps];
  const int t = blockIdx.x, h = blockIdx.y;
  const int dim = p.head_dim;
  const int64_t query_row = (static_cast<int64_t>(t) * p.num_heads + h) * dim;
  for (int d = threadIdx.x; d < dim; d += blockDim.x) query[d] = __bfloat162float(p.query[query_row + d]);

  const int position = p.tokens.positions[t];
  const int first = p.sliding_window > 0 ? max(0, position - p.sliding_window + 1) : 0;
  const int num_window = position - first + 1;
  const int num_closed = p.compress_rate > 0 ? (position + 1) / p.compress_rate : 0;
  const int num_entries = p.compress_rate == 0 ? 0 : p.selected ? p.top_k : num_closed;
  const int num_candidates = num_window + num_entries;

  float max_score = p.sinks ? p.sinks[h] : -INFINITY;
  float denominator = p.sinks ? 1.0f : 0.0f;
  float acc[kMaxDimsPerThread] = {};
  __syncthreads();
  for (int base = 0; base < num_candidates; base += blockDim.x) {
    const int c = base + threadIdx.x;
    float score = -INFINITY;
    const void* vec = nullptr;
    bool entry = false;
    if (c < num_window) {
      vec = p.keys + token_slot(p.tokens, t, first + c) * dim;
    } else if (c < num_candidates) {
      const int k = c - num_window;
      // An entry index outside the closed windows (-1: the indexer found fewer) names no candidate.
      const int e = p.selected ? p.selected[static_cast<int64_t>(t) * p.top_k + k] : k;
      if (e >= 0 && e < num_closed) {
        vec = p.states + token_slot(p.tokens, t, (e + 1) * p.compress_rate - 1) * p.state_dim + p.entry_offset;
        entry = true;
      }
    }
    if (vec) {
      float dot = 0.0f;
      if (entry) {
        const float* v = static_cast<const float*>(vec);
        for (int d = 0; d < dim; ++d) dot += query[d] * v[d];
      } else {
        const __nv_bfloat16* v = static_cast<const __nv_bfloat16*>(vec);
        for (int d = 0; d < dim; ++d) dot += query[d] * __bfloat162float(v[d]);
      }
      score = dot * p.scale;
    }
    const float chunk_max = block_reduce<true>(score, scratch);
    const float new_max = fmaxf(max_score, chunk_max);
    if (new_max == -INFINITY) continue;  // nothing seen yet: no sink and every candidate so far empty
    const float rescale = expf(max_score - new_max);
    const float prob = vec ? expf(score - new_max) : 0.0f;
    probability[threadIdx.x] = prob;
    source[threadIdx.x] = vec;
    is_entry[threadIdx.x] = entry;
    denominator = denominator * rescale + block_reduce<false>(prob, scratch);  // its syncs publish the arrays
    max_score = new_max;
    const int count = min(static_cast<int>(blockDim.x), num_candidates - base);
    for (int i = 0; i < kMaxDimsPerThread; ++i) {
      const int d = threadIdx.x + i * kThreads;
      if (d >= dim) break;
      float sum = acc[i] * rescale;
      for (int j = 0; j < count; ++j) {
        if (!source[j]) continue;
        const float value = is_entry[j] ? static_cast<const float*>(source[j])[d]
                                        : __bfloat162float(static_cast<const __nv_bfloat16*>(source[j])[d]);
        sum += probability[j] * value;
      }
      acc[i] = sum;
    }
    __syncthreads();  // the arrays are rewritten by the next chunk
  }
  for (int i = 0; i < kMaxDimsPerThread; ++i) {
    const int d = threadIdx.x + i * kThreads;
    if (d >= dim) break;
    p.out[query_row + d] = __float2bfloat16(denominator > 0.0f ? acc[i] / denominator : 0.0f);
  }
}

void check_tokens(const V4Tokens& tokens, const char* what) {
  if (tokens.num_tokens < 0 || tokens.block_size <= 0) {
    throw std::invalid_argument(std::string(what) + ": needs a positive block size");
  }
}

}  // namespace

void launch_compress_kv(const CompressKvParams& p, cudaStream_t stream) {
  check_tokens(p.tokens, "compress_kv");
  const int width = p.overlapping ? 2 * p.entry_dim : p.entry_dim;
  if (p.compress_rate <= 0 || p.entry_dim <= 0) {
    throw std::invalid_argument("compress_kv: compress rate and entry dim must be positive");
  }
  if (p.state_offset < 0 || p.state_offset + 2 * width + p.entry_dim > p.state_dim) {
    throw std::invalid_argument("compress_kv: the compressor's region lies outside the state row");
  }
  if (p.rope.rotary_dim < 0 || p.rope.rotary_dim % 2 != 0 || p.rope.first_dim < 0 ||
      p.rope.first_dim + p.rope.rotary_dim > p.entry_dim) {
    throw std::invalid_argument("compress_kv: the rotated dims lie outside the entry");
  }
  if (p.tokens.num_tokens == 0) return;
  compress_rows_kernel<<<p.tokens.num_tokens, kThreads, 0, stream>>>(p);
  compress_entries_kernel<<<p.tokens.num_tokens, kThreads, p.entry_dim * sizeof(float), stream>>>(p);
}

void launch_select_compressed(const SelectCompressedParams& p, cudaStream_t stream) {
  check_tokens(p.tokens, "select_compressed");
  if (p.compress_rate <= 0 || p.top_k <= 0 || p.top_k > kMaxIndexerTopK || p.num_heads <= 0 || p.head_dim <= 0) {
    throw std::invalid_argument("select_compressed: needs a positive compress rate, heads, head dim and top_k up to " +
                                std::to_string(kMaxIndexerTopK));
  }
  if (p.entry_offset < 0 || p.entry_offset + p.head_dim > p.state_dim) {
    throw std::invalid_argument("select_compressed: the indexer's entries lie outside the state row");
  }
  const SelectLayout layout(p.num_heads, p.head_dim, p.top_k);
  if (layout.bytes > 200 * 1024) {
    throw std::invalid_argument("select_compressed: the query and top-k need more shared memory than a block has");
  }
  if (p.tokens.num_tokens == 0) return;
  const cudaError_t err =
      cudaFuncSetAttribute(select_compressed_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, layout.bytes);
  if (err != cudaSuccess) throw std::runtime_error(std::string("select_compressed: ") + cudaGetErrorString(err));
  select_compressed_kernel<<<p.tokens.num_tokens, kThreads, layout.bytes, stream>>>(p);
}

void launch_compressed_attention(const CompressedAttentionParams& p, cudaStream_t stream) {
  check_tokens(p.tokens, "compressed_attention");
  if (p.head_dim <= 0 || p.head_dim > kMaxCompressedHeadDim || p.num_heads <= 0 || p.num_heads > 65535) {
    throw std::invalid_argument("compressed_attention: head dim must be 1 to " +
                                std::to_string(kMaxCompressedHeadDim) + ", heads 1 to 65535");
  }
  if (p.compress_rate < 0 || p.sliding_window < 0 || (p.selected && p.top_k <= 0)) {
    throw std::invalid_argument("compressed_attention: negative compress rate or window, or no top_k for selections");
  }
  if (p.compress_rate > 0 && (!p.states || p.entry_offset < 0 || p.entry_offset + p.head_dim > p.state_dim)) {
    throw std::invalid_argument("compressed_attention: the entries lie outside the state row");
  }
  if (p.tokens.num_tokens == 0) return;
  compressed_attention_kernel<<<dim3(p.tokens.num_tokens, p.num_heads), kThreads, 0, stream>>>(p);
}

}  // namespace tern::kernels
