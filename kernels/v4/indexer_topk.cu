#include <algorithm>
#include <stdexcept>
#include <string>

#include "common/dependent_launch.cuh"
#include "common/device_math.cuh"
#include "v4/indexer_topk.h"
#include "v4/v4_tokens.cuh"

namespace tern::kernels {

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

// A tile of 128 entries, 16 to a warp (two mma columns of 8), against every head of the token (mma rows of 16),
// chunks of 64 heads at a time, 16 dims an mma.
constexpr int kTileEntries = 128;
constexpr int kWarpEntries = kTileEntries / kWarps;
constexpr int kHeadChunk = 64;
constexpr int kChunkTiles = kHeadChunk / 16;
constexpr int kMmaDims = 16;

__host__ __device__ inline int round_up(int x, int multiple) { return (x + multiple - 1) / multiple * multiple; }

// Byte offsets of the scoring block's shared memory: the bf16 query (heads padded to chunks of 64, dims to a
// multiple of 16, with zeros), head weights, a tile of float32 entries. A query row is 4 words past a multiple of
// 32, so that the 8 rows x 4 words an mma's A fragment reads fall in distinct banks; an entry row is 8 floats past a
// multiple of 32, so that the 4 rows x 4 float pairs a half-warp reads for its B fragments do. V4's 64 heads x 128
// take 87 KB: two blocks to an SM, one loading its tile while the other scores.
struct ScoreLayout {
  int width = 0;         // head_dim rounded up to a multiple of 16
  int query_stride = 0;  // bf16 values between query rows
  int key_stride = 0;    // floats between entry rows
  int num_head_chunks = 0;
  int query = 0, weights = 0, keys = 0, bytes = 0;

  ScoreLayout(int num_heads, int head_dim) {
    width = round_up(head_dim, kMmaDims);
    query_stride = 2 * (round_up(width / 2, 32) + 4);
    key_stride = round_up(width, 32) + 8;
    num_head_chunks = (num_heads + kHeadChunk - 1) / kHeadChunk;
    const int padded_heads = num_head_chunks * kHeadChunk;
    weights = round_up(query + padded_heads * query_stride * 2, 16);
    keys = round_up(weights + padded_heads * 4, 16);
    bytes = keys + kTileEntries * key_stride * 4;
  }
};

struct ScoreArgs {
  SelectCompressedParams p;
  ScoreLayout layout;
  bool vector_loads;  // entries 16-byte aligned in the state rows, head_dim the layout's width
};

// The tile's entries [base, base + tile) from the paged cache into keys[e * key_stride + d], dims past head_dim 0
// (with vector loads head_dim is the width). Entries past the tile keep what they held: their scores are not written.
__device__ void load_keys(const SelectCompressedParams& p, const ScoreLayout& layout, bool vector_loads,
                          int table_offset, int base, int tile, float* keys) {
  const auto entry_row = [&](int e) {
    const int position = (base + e + 1) * p.compress_rate - 1;
    return p.states + v4::paged_slot(p.tokens.block_tables, table_offset, position, p.tokens.block_size) * p.state_dim +
           p.entry_offset;
  };
  if (vector_loads) {
    const int chunks = p.head_dim / 4;
    for (int i = threadIdx.x; i < tile * chunks; i += kThreads) {
      const int e = i / chunks, c = i % chunks;
      *reinterpret_cast<float4*>(keys + e * layout.key_stride + 4 * c) =
          *reinterpret_cast<const float4*>(entry_row(e) + 4 * c);
    }
  } else {
    for (int i = threadIdx.x; i < tile * layout.width; i += kThreads) {
      const int e = i / layout.width, d = i % layout.width;
      keys[e * layout.key_stride + d] = d < p.head_dim ? entry_row(e)[d] : 0.0f;
    }
  }
}

// Two float32 values as three bf16 pairs whose sum is exactly the values: the high part is each rounded to bf16, the
// middle part the rest rounded, the low part what is left (8 + 8 + 8 significant bits cover float32's 24; the two
// subtractions are exact). The query is bf16 already, so q * hi + q * mid + q * lo is q * k with every product exact
// in the float32 accumulators: float32 accuracy, as the CPU reference scores, at three bf16 products a pair.
__device__ __forceinline__ void split_bf16x3(float2 v, uint32_t& hi, uint32_t& mid, uint32_t& lo) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(v.x, v.y);
  const float2 hf = __bfloat1622float2(h);
  const float2 r = make_float2(v.x - hf.x, v.y - hf.y);
  const __nv_bfloat162 m = __floats2bfloat162_rn(r.x, r.y);
  const float2 mf = __bfloat1622float2(m);
  const __nv_bfloat162 l = __floats2bfloat162_rn(r.x - mf.x, r.y - mf.y);
  hi = *reinterpret_cast<const uint32_t*>(&h);
  mid = *reinterpret_cast<const uint32_t*>(&m);
  lo = *reinterpret_cast<const uint32_t*>(&l);
}

// The scores of the warp's 16 entries of a tile, summed over all heads: per chunk of 64 heads the dot products
// q_h . k_e on tensor cores (mma.m16n8k16, each key split into three bf16 parts as it is read, smallest products
// first), then relu, times the head's weight (softmax_scale and weights_scale in it). A lane ends with the sums of
// entries 2 * (lane % 4) + {0, 1} of each of its two mma columns, summed over the lanes of its column.
__device__ void score_tile(const uint32_t* query, const float* weights, const float* keys, const ScoreLayout& layout,
                           float (&sums)[2][2]) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int group = lane / 4, column = lane % 4;
  const int query_words = layout.query_stride / 2;
  const float* warp_keys = keys + warp * kWarpEntries * layout.key_stride;
  for (int n = 0; n < 2; ++n) sums[n][0] = sums[n][1] = 0.0f;
  for (int chunk = 0; chunk < layout.num_head_chunks; ++chunk) {
    float acc[kChunkTiles][2][4] = {};
    const int row0 = chunk * kHeadChunk;
    for (int k0 = 0; k0 < layout.width; k0 += kMmaDims) {
      uint32_t b_hi[2][2], b_mid[2][2], b_lo[2][2];  // [mma column][fragment register]
#pragma unroll
      for (int n = 0; n < 2; ++n) {
        const float* key = warp_keys + (8 * n + group) * layout.key_stride + k0 + 2 * column;
        split_bf16x3(*reinterpret_cast<const float2*>(key), b_hi[n][0], b_mid[n][0], b_lo[n][0]);
        split_bf16x3(*reinterpret_cast<const float2*>(key + 8), b_hi[n][1], b_mid[n][1], b_lo[n][1]);
      }
#pragma unroll
      for (int m = 0; m < kChunkTiles; ++m) {
        const uint32_t* row = query + (row0 + 16 * m + group) * query_words + k0 / 2 + column;
        const uint32_t a[4] = {row[0], row[8 * query_words], row[4], row[8 * query_words + 4]};
#pragma unroll
        for (int n = 0; n < 2; ++n) {
          mma_bf16_16816(acc[m][n], a, b_lo[n][0], b_lo[n][1]);
          mma_bf16_16816(acc[m][n], a, b_mid[n][0], b_mid[n][1]);
          mma_bf16_16816(acc[m][n], a, b_hi[n][0], b_hi[n][1]);
        }
      }
    }
#pragma unroll
    for (int m = 0; m < kChunkTiles; ++m) {
      const float w_lo = weights[row0 + 16 * m + group], w_hi = weights[row0 + 16 * m + group + 8];
#pragma unroll
      for (int n = 0; n < 2; ++n) {
        sums[n][0] += fmaxf(acc[m][n][0], 0.0f) * w_lo + fmaxf(acc[m][n][2], 0.0f) * w_hi;
        sums[n][1] += fmaxf(acc[m][n][1], 0.0f) * w_lo + fmaxf(acc[m][n][3], 0.0f) * w_hi;
      }
    }
  }
#pragma unroll
  for (int n = 0; n < 2; ++n) {
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      for (int offset = 4; offset < 32; offset *= 2) sums[n][c] += __shfl_xor_sync(0xffffffffu, sums[n][c], offset);
    }
  }
}

// Grid (tokens, splits): split s scores the token's tiles s, s + splits, ... of 128 entries into its score row;
// split 0 also writes the row's length, the token's closed windows.
__global__ void __launch_bounds__(kThreads) score_entries_kernel(ScoreArgs args) {
  extern __shared__ __align__(16) unsigned char smem[];
  const SelectCompressedParams& p = args.p;
  const ScoreLayout& layout = args.layout;
  wait_for_prior_grids();
  allow_dependent_grids();
  const int t = blockIdx.x, split = blockIdx.y;
  // A row holds score_stride entries: the launcher's caller sizes it for every token (the clamp guards memory only).
  const int num_visible = min((p.tokens.positions[t] + 1) / p.compress_rate, p.score_stride);
  if (split == 0 && threadIdx.x == 0) p.row_lengths[t] = num_visible;
  if (split * kTileEntries >= num_visible) return;

  __nv_bfloat16* query = reinterpret_cast<__nv_bfloat16*>(smem + layout.query);  // [padded heads, query_stride]
  float* weights = reinterpret_cast<float*>(smem + layout.weights);                // [padded heads]
  float* keys = reinterpret_cast<float*>(smem + layout.keys);                      // [kTileEntries, key_stride]
  const int padded_heads = layout.num_head_chunks * kHeadChunk;
  const __nv_bfloat16* query_row = p.query + static_cast<int64_t>(t) * p.num_heads * p.head_dim;
  for (int i = threadIdx.x; i < padded_heads * layout.width; i += kThreads) {
    const int h = i / layout.width, d = i % layout.width;
    query[h * layout.query_stride + d] =
        h < p.num_heads && d < p.head_dim ? query_row[h * p.head_dim + d] : __float2bfloat16(0.0f);
  }
  for (int h = threadIdx.x; h < padded_heads; h += kThreads) {
    weights[h] = h < p.num_heads ? __bfloat162float(p.head_weights[static_cast<int64_t>(t) * p.num_heads + h]) *
                                       p.weights_scale * p.softmax_scale
                                 : 0.0f;  // padding heads' dots are 0 as well
  }
  float* scores = p.scores + static_cast<int64_t>(t) * p.score_stride;
  const int table_offset = p.tokens.block_table_offsets[p.tokens.token_seq[t]];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int base = split * kTileEntries; base < num_visible; base += p.num_splits * kTileEntries) {
    const int tile = min(kTileEntries, num_visible - base);
    __syncthreads();  // the previous tile's keys are read
    load_keys(p, layout, args.vector_loads, table_offset, base, tile, keys);
    __syncthreads();  // this tile's keys (and at first the query) are in shared memory
    float sums[2][2];
    score_tile(reinterpret_cast<const uint32_t*>(query), weights, keys, layout, sums);
    if (lane < 4) {
#pragma unroll
      for (int n = 0; n < 2; ++n) {
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          const int e = warp * kWarpEntries + 8 * n + 2 * lane + c;
          if (e < tile) scores[base + e] = sums[n][c];
        }
      }
    }
  }
}

}  // namespace

void launch_select_compressed(const SelectCompressedParams& p, cudaStream_t stream) {
  v4::check_tokens(p.tokens, "select_compressed");
  if (p.compress_rate <= 0 || p.top_k <= 0 || p.top_k > kMaxIndexerTopK || p.num_heads <= 0 || p.head_dim <= 0) {
    throw std::invalid_argument("select_compressed: needs a positive compress rate, heads, head dim and top_k up to " +
                                std::to_string(kMaxIndexerTopK));
  }
  if (p.entry_offset < 0 || p.entry_offset + p.head_dim > p.state_dim) {
    throw std::invalid_argument("select_compressed: the indexer's entries lie outside the state row");
  }
  if (p.num_splits < 1 || !p.scores || !p.row_lengths || p.score_stride < 0 || p.score_rows < 1) {
    throw std::invalid_argument("select_compressed: needs at least one split and a score workspace");
  }
  const ScoreLayout layout(p.num_heads, p.head_dim);
  int device = 0, max_bytes = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&max_bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess) {
    throw std::runtime_error("select_compressed: cannot read the device's shared memory per block");
  }
  if (layout.bytes > max_bytes) {
    throw std::invalid_argument("select_compressed: a query of " + std::to_string(p.num_heads) + " heads x " +
                                std::to_string(p.head_dim) + " dims needs more shared memory than a block has");
  }
  const bool vector_loads = p.head_dim == layout.width && p.state_dim % 4 == 0 && p.entry_offset % 4 == 0 &&
                            reinterpret_cast<uintptr_t>(p.states) % 16 == 0;
  const cudaError_t err = cudaFuncSetAttribute(reinterpret_cast<const void*>(score_entries_kernel),
                                               cudaFuncAttributeMaxDynamicSharedMemorySize, layout.bytes);
  if (err != cudaSuccess) throw std::runtime_error(std::string("select_compressed: ") + cudaGetErrorString(err));
  // Rows of the workspace at a time: the scores of a chunk of tokens, then their selection.
  for (int first = 0; first < p.tokens.num_tokens; first += p.score_rows) {
    SelectCompressedParams chunk = p;
    chunk.tokens.num_tokens = std::min(p.score_rows, p.tokens.num_tokens - first);
    chunk.tokens.positions += first;
    chunk.tokens.token_seq += first;
    chunk.query += static_cast<int64_t>(first) * p.num_heads * p.head_dim;
    chunk.head_weights += static_cast<int64_t>(first) * p.num_heads;
    chunk.selected += static_cast<int64_t>(first) * p.top_k;
    launch_dependent("select_compressed", score_entries_kernel, dim3(chunk.tokens.num_tokens, p.num_splits), kThreads,
                     layout.bytes, stream, ScoreArgs{chunk, layout, vector_loads});
    RowTopkParams select;
    select.values = p.scores;
    select.row_stride = p.score_stride;
    select.row_lengths = p.row_lengths;
    select.num_rows = chunk.tokens.num_tokens;
    select.k = p.top_k;
    select.out = chunk.selected;
    launch_row_topk(select, stream);
  }
}

}  // namespace tern::kernels
