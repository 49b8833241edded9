#include <algorithm>
#include <stdexcept>
#include <string>

#include "v4/indexer_topk.h"
#include "v4/v4_tokens.cuh"

namespace tern::kernels {

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kRadixBins = 256;  // one per thread in a radix pass
static_assert(kRadixBins == kThreads && kMaxIndexerSplits <= kThreads, "a thread per bin and per split");

// Scoring: a warp owns 8 heads of a chunk of 64, a lane up to 4 entries of a tile of 128.
constexpr int kHeadsPerWarp = 8;
constexpr int kHeadChunk = kHeadsPerWarp * kWarps;
constexpr int kTileEntries = 128;
constexpr int kEntryGranule = 32;  // a split's entries start at a multiple of it

// Merging: each thread offers this many of a token's split candidates per round.
constexpr int kMergeItemsPerThread = 16;
constexpr int kMergeRound = kThreads * kMergeItemsPerThread;

__host__ __device__ inline int round_up(int x, int multiple) { return (x + multiple - 1) / multiple * multiple; }

// Room for the kept top_k plus a round of new candidates, and for padding the final top_k to a power of two.
int candidate_capacity(int top_k, int round) {
  int pow2 = 1;
  while (pow2 < top_k) pow2 *= 2;
  return std::max(top_k + round, pow2);
}

// ---- candidates: a 64-bit key per entry that orders as the indexer ranks (v4::ranks_ahead) ----

// The score's bits turned so that unsigned order is float order, NaN above all and -0 equal to +0.
__device__ __forceinline__ uint32_t score_key(float score) {
  if (score != score) return 0xffffffffu;
  uint32_t bits = __float_as_uint(score);
  if (bits == 0x80000000u) bits = 0;
  return bits & 0x80000000u ? ~bits : bits | 0x80000000u;
}

// Larger is better: the score key, then the lower entry. Never 0 (the key of -inf is 0x007fffff).
__device__ __forceinline__ uint64_t candidate(float score, int entry) {
  return uint64_t{score_key(score)} << 32 | static_cast<uint32_t>(~entry);
}

__device__ __forceinline__ int candidate_entry(uint64_t c) { return static_cast<int>(~static_cast<uint32_t>(c)); }

// ---- a block's candidate list in shared memory, pruned to the exact top_k by radix select ----

struct SelectShared {
  unsigned hist[kRadixBins];
  int warp_sums[kWarps];
  uint64_t floor;  // candidates enter only above it: the worst kept one since the last prune
  uint64_t prefix;
  unsigned long long min_kept;
  int count;  // candidates in the list
  int kept;
  int remaining;
  int done;
};

struct CandidateList {
  uint64_t* items;    // [capacity]
  uint64_t* scratch;  // [capacity], where a prune gathers the kept ones
  SelectShared* shared;
};

// Inclusive sum of one value per thread over the block. The caller separates two calls by a barrier.
__device__ int block_inclusive_scan(int v, int* warp_sums) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
  for (int offset = 1; offset < 32; offset *= 2) {
    const int other = __shfl_up_sync(0xffffffffu, v, offset);
    if (lane >= offset) v += other;
  }
  if (lane == 31) warp_sums[warp] = v;
  __syncthreads();
  for (int w = 0; w < warp; ++w) v += warp_sums[w];
  return v;
}

// Writes x to dst[(*count)++] where `take`; every lane of the warp calls, one atomic per warp.
__device__ __forceinline__ void append(uint64_t x, bool take, uint64_t* dst, int* count) {
  const unsigned mask = __ballot_sync(0xffffffffu, take);
  if (mask == 0) return;
  const int lane = threadIdx.x % 32, leader = __ffs(mask) - 1;
  int base = 0;
  if (lane == leader) base = atomicAdd(count, __popc(mask));
  base = __shfl_sync(0xffffffffu, base, leader);
  if (take) dst[base + __popc(mask & ((1u << lane) - 1))] = x;
}

// A threshold with exactly k of the distinct items[0, count) at or above it (0 < k <= count): 8-bit digits from the
// top, stopping once the bucket of the k-th holds exactly the items still needed (after the score's bits unless
// scores tie across the cut).
__device__ uint64_t radix_threshold(const uint64_t* items, int count, int k, SelectShared& sh) {
  uint64_t prefix = 0;
  int remaining = k;
  for (int shift = 56;; shift -= 8) {
    const uint64_t decided = shift == 56 ? 0 : ~uint64_t{0} << (shift + 8);
    sh.hist[threadIdx.x] = 0;
    __syncthreads();
    for (int i = threadIdx.x; i < count; i += kThreads) {
      const uint64_t x = items[i];
      if ((x & decided) == prefix) atomicAdd(&sh.hist[(x >> shift) & 0xff], 1u);
    }
    __syncthreads();
    const int bin = kRadixBins - 1 - threadIdx.x;  // threads in descending bin order
    const int in_bin = static_cast<int>(sh.hist[bin]);
    const int through = block_inclusive_scan(in_bin, sh.warp_sums);  // items in this bin and above
    const int above = through - in_bin;
    if (above < remaining && remaining <= through) {
      sh.prefix = prefix | uint64_t(bin) << shift;
      sh.remaining = remaining - above;
      sh.done = in_bin == remaining - above;
    }
    __syncthreads();
    prefix = sh.prefix;
    remaining = sh.remaining;
    if (sh.done || shift == 0) return prefix;
  }
}

// Keeps the k best candidates (all when there are no more); the worst kept becomes the floor. Every thread calls it
// after a barrier that published the list.
__device__ void prune(CandidateList& list, int k) {
  SelectShared& sh = *list.shared;
  const int count = sh.count;
  if (count <= k) return;
  const uint64_t threshold = radix_threshold(list.items, count, k, sh);
  if (threadIdx.x == 0) {
    sh.kept = 0;
    sh.min_kept = ~0ull;
  }
  __syncthreads();
  // Bounded by a multiple of 32 so that whole warps reach the ballot.
  for (int i = threadIdx.x; i < round_up(count, 32); i += kThreads) {
    const uint64_t x = i < count ? list.items[i] : 0;
    const bool keep = i < count && x >= threshold;
    if (keep) atomicMin(&sh.min_kept, static_cast<unsigned long long>(x));
    append(x, keep, list.scratch, &sh.kept);
  }
  __syncthreads();
  for (int i = threadIdx.x; i < k; i += kThreads) list.items[i] = list.scratch[i];
  if (threadIdx.x == 0) {
    sh.count = k;
    sh.floor = sh.min_kept;
  }
  __syncthreads();
}

// Offers one candidate per thread (every lane calls, `valid` or not); those above the floor join the list, which
// has room for them.
__device__ __forceinline__ void offer(CandidateList& list, uint64_t x, bool valid) {
  append(x, valid && x > list.shared->floor, list.items, &list.shared->count);
}

// The top_k of the list, best first, then -1: a bitonic sort of the kept ones padded to a power of two.
__device__ void write_best_first(CandidateList& list, int top_k, int32_t* out) {
  prune(list, top_k);
  const int count = list.shared->count;
  int n = 1;
  while (n < count) n *= 2;
  for (int i = count + threadIdx.x; i < n; i += kThreads) list.items[i] = 0;
  __syncthreads();
  for (int size = 2; size <= n; size *= 2) {
    for (int stride = size / 2; stride > 0; stride /= 2) {
      for (int i = threadIdx.x; i < n / 2; i += kThreads) {
        const int lo = 2 * i - (i & (stride - 1)), hi = lo + stride;
        const uint64_t a = list.items[lo], b = list.items[hi];
        if ((a < b) == ((lo & size) == 0)) {  // descending runs at even multiples of size
          list.items[lo] = b;
          list.items[hi] = a;
        }
      }
      __syncthreads();
    }
  }
  for (int i = threadIdx.x; i < top_k; i += kThreads) out[i] = i < count ? candidate_entry(list.items[i]) : -1;
}

// ---- phase 1: score a split of a token's entries ----

// Byte offsets of the scoring block's shared memory: the query (heads padded to chunks of 64 with zeros, dims to a
// multiple of 4), head weights, a tile of entries (or a prune's scratch), per-warp partial scores, the candidates.
struct ScoreLayout {
  int width = 0;          // head_dim rounded up to a multiple of 4
  int entry_stride = 0;   // floats between a tile's entries: a float4 read of 8 lanes' rows hits distinct banks
  int num_head_chunks = 0;
  int capacity = 0;
  int query = 0, weights = 0, region = 0, partials = 0, items = 0, bytes = 0;

  ScoreLayout(int num_heads, int head_dim, int top_k) {
    width = round_up(head_dim, 4);
    entry_stride = (width / 4) % 2 == 1 ? width : width + 4;
    num_head_chunks = (num_heads + kHeadChunk - 1) / kHeadChunk;
    capacity = candidate_capacity(top_k, kTileEntries);
    const int padded_heads = num_head_chunks * kHeadChunk;
    weights = query + padded_heads * width * 4;
    region = weights + padded_heads * 4;
    partials = region + round_up(std::max(kTileEntries * entry_stride * 4, capacity * 8), 16);
    items = partials + kWarps * kTileEntries * 4;
    bytes = items + capacity * 8;
  }
};

struct ScoreArgs {
  SelectCompressedParams p;
  ScoreLayout layout;
  bool vector_loads;  // entries 16-byte aligned in the state rows
};

// The tile's entries [base, base + tile) from the paged cache into keys[e * entry_stride + d], dims past head_dim 0.
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
      *reinterpret_cast<float4*>(keys + e * layout.entry_stride + 4 * c) =
          *reinterpret_cast<const float4*>(entry_row(e) + 4 * c);
    }
  } else {
    for (int i = threadIdx.x; i < tile * layout.width; i += kThreads) {
      const int e = i / layout.width, d = i % layout.width;
      keys[e * layout.entry_stride + d] = d < p.head_dim ? entry_row(e)[d] : 0.0f;
    }
  }
}

// Each warp's share of the scores of a tile's entries lane + 32 * j (j < Entries): its 8 heads of every chunk, each
// a float32 dot over the dims in order, relu, times softmax_scale and the head's weight. Into partials[warp][entry].
template <int Entries>
__device__ void score_tile(const float* query, const float* weights, const float* keys, const ScoreLayout& layout,
                           float softmax_scale, float* partials) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  float partial[Entries] = {};
  for (int chunk = 0; chunk < layout.num_head_chunks; ++chunk) {
    const int head = chunk * kHeadChunk + warp * kHeadsPerWarp;
    const float* q = query + head * layout.width;
    float dot[kHeadsPerWarp][Entries] = {};
#pragma unroll 2
    for (int d = 0; d < layout.width; d += 4) {
      float4 k[Entries];
#pragma unroll
      for (int j = 0; j < Entries; ++j) {
        k[j] = *reinterpret_cast<const float4*>(keys + (lane + 32 * j) * layout.entry_stride + d);
      }
#pragma unroll
      for (int h = 0; h < kHeadsPerWarp; ++h) {
        const float4 qv = *reinterpret_cast<const float4*>(q + h * layout.width + d);  // the warp's broadcast
#pragma unroll
        for (int j = 0; j < Entries; ++j) {
          float acc = dot[h][j];
          acc = fmaf(qv.x, k[j].x, acc);
          acc = fmaf(qv.y, k[j].y, acc);
          acc = fmaf(qv.z, k[j].z, acc);
          dot[h][j] = fmaf(qv.w, k[j].w, acc);
        }
      }
    }
#pragma unroll
    for (int h = 0; h < kHeadsPerWarp; ++h) {
      const float w = weights[head + h];  // 0 for padding heads, whose dots are 0
#pragma unroll
      for (int j = 0; j < Entries; ++j) partial[j] += fmaxf(dot[h][j], 0.0f) * softmax_scale * w;
    }
  }
#pragma unroll
  for (int j = 0; j < Entries; ++j) partials[warp * kTileEntries + lane + 32 * j] = partial[j];
}

// Grid (tokens, splits). Split s takes the token's entries [s * share, (s + 1) * share), share a multiple of 32
// covering the closed windows over the splits; tiles of them scored and offered to the block's candidate list.
__global__ void __launch_bounds__(kThreads, 2) score_entries_kernel(ScoreArgs args) {
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ SelectShared shared;
  const SelectCompressedParams& p = args.p;
  const ScoreLayout& layout = args.layout;
  const int t = blockIdx.x, split = blockIdx.y;
  const int num_visible = (p.tokens.positions[t] + 1) / p.compress_rate;
  const int share = round_up((num_visible + p.num_splits - 1) / p.num_splits, kEntryGranule);
  const int begin = split * share, end = min(num_visible, begin + share);
  int32_t* out = p.selected + static_cast<int64_t>(t) * p.top_k;
  const int64_t split_row = static_cast<int64_t>(t) * p.num_splits + split;
  if (begin >= end) {
    if (p.num_splits == 1) {
      for (int i = threadIdx.x; i < p.top_k; i += kThreads) out[i] = -1;
    } else if (threadIdx.x == 0) {
      p.split_counts[split_row] = 0;
    }
    return;
  }

  float* query = reinterpret_cast<float*>(smem + layout.query);        // [padded heads, width]
  float* weights = reinterpret_cast<float*>(smem + layout.weights);    // [padded heads]
  float* keys = reinterpret_cast<float*>(smem + layout.region);        // [kTileEntries, entry_stride]
  float* partials = reinterpret_cast<float*>(smem + layout.partials);  // [kWarps, kTileEntries]
  CandidateList list{reinterpret_cast<uint64_t*>(smem + layout.items),
                     reinterpret_cast<uint64_t*>(smem + layout.region), &shared};
  const int padded_heads = layout.num_head_chunks * kHeadChunk;
  const __nv_bfloat16* query_row = p.query + static_cast<int64_t>(t) * p.num_heads * p.head_dim;
  for (int i = threadIdx.x; i < padded_heads * layout.width; i += kThreads) {
    const int h = i / layout.width, d = i % layout.width;
    query[i] = h < p.num_heads && d < p.head_dim ? __bfloat162float(query_row[h * p.head_dim + d]) : 0.0f;
  }
  for (int h = threadIdx.x; h < padded_heads; h += kThreads) {
    weights[h] = h < p.num_heads
                     ? __bfloat162float(p.head_weights[static_cast<int64_t>(t) * p.num_heads + h]) * p.weights_scale
                     : 0.0f;
  }
  if (threadIdx.x == 0) {
    shared.count = 0;
    shared.floor = 0;
  }
  const int table_offset = p.tokens.block_table_offsets[p.tokens.token_seq[t]];
  for (int base = begin; base < end; base += kTileEntries) {
    const int tile = min(kTileEntries, end - base);
    __syncthreads();  // the previous tile's keys and partials are read, the list's count is published
    if (shared.count + tile > layout.capacity) prune(list, p.top_k);  // the prune's scratch is the keys' region
    load_keys(p, layout, args.vector_loads, table_offset, base, tile, keys);
    __syncthreads();
    if (tile <= 32) {
      score_tile<1>(query, weights, keys, layout, p.softmax_scale, partials);
    } else if (tile <= 64) {
      score_tile<2>(query, weights, keys, layout, p.softmax_scale, partials);
    } else {
      score_tile<4>(query, weights, keys, layout, p.softmax_scale, partials);
    }
    __syncthreads();
    float score = 0.0f;
    if (threadIdx.x < tile) {
      for (int w = 0; w < kWarps; ++w) score += partials[w * kTileEntries + threadIdx.x];
    }
    offer(list, candidate(score, base + threadIdx.x), threadIdx.x < tile);
  }
  __syncthreads();
  if (p.num_splits == 1) {
    write_best_first(list, p.top_k, out);
    return;
  }
  prune(list, p.top_k);
  const int count = shared.count;
  uint64_t* candidates = p.split_candidates + split_row * p.top_k;
  for (int i = threadIdx.x; i < count; i += kThreads) candidates[i] = list.items[i];
  if (threadIdx.x == 0) p.split_counts[split_row] = count;
}

// ---- phase 2: merge a token's split candidates ----

struct MergeArgs {
  SelectCompressedParams p;
  int capacity;
};

// One block per token: its splits' candidates numbered back to back, streamed through the candidate list a round at
// a time from the last entries (often the best: the floor rises early and fewer candidates enter), then sorted.
__global__ void __launch_bounds__(kThreads) merge_splits_kernel(MergeArgs args) {
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ SelectShared shared;
  __shared__ int split_start[kMaxIndexerSplits];
  __shared__ int num_candidates;
  const SelectCompressedParams& p = args.p;
  const int t = blockIdx.x, num_splits = p.num_splits;
  CandidateList list{reinterpret_cast<uint64_t*>(smem), reinterpret_cast<uint64_t*>(smem) + args.capacity, &shared};
  const int count =
      threadIdx.x < num_splits ? p.split_counts[static_cast<int64_t>(t) * num_splits + threadIdx.x] : 0;
  const int through = block_inclusive_scan(count, shared.warp_sums);
  if (threadIdx.x < num_splits) split_start[threadIdx.x] = through - count;
  if (threadIdx.x == kThreads - 1) num_candidates = through;
  if (threadIdx.x == 0) {
    shared.count = 0;
    shared.floor = 0;
  }
  __syncthreads();
  const int total = num_candidates;
  const uint64_t* candidates = p.split_candidates + static_cast<int64_t>(t) * num_splits * p.top_k;
  for (int round = 0; round < total; round += kMergeRound) {
    if (shared.count + kMergeRound > args.capacity) prune(list, p.top_k);
    uint64_t x[kMergeItemsPerThread];
#pragma unroll
    for (int j = 0; j < kMergeItemsPerThread; ++j) {
      const int g = round + j * kThreads + threadIdx.x;
      x[j] = 0;  // no candidate is 0
      if (g < total) {
        const int i = total - 1 - g;
        int lo = 0, hi = num_splits - 1;  // the last split starting at or before i (empty ones share starts)
        while (lo < hi) {
          const int mid = (lo + hi + 1) / 2;
          if (split_start[mid] <= i) {
            lo = mid;
          } else {
            hi = mid - 1;
          }
        }
        x[j] = candidates[static_cast<int64_t>(lo) * p.top_k + (i - split_start[lo])];
      }
    }
#pragma unroll
    for (int j = 0; j < kMergeItemsPerThread; ++j) offer(list, x[j], x[j] != 0);
    __syncthreads();
  }
  write_best_first(list, p.top_k, p.selected + static_cast<int64_t>(t) * p.top_k);
}

void set_shared_bytes(const void* kernel, int bytes) {
  const cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (err != cudaSuccess) throw std::runtime_error(std::string("select_compressed: ") + cudaGetErrorString(err));
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
  if (p.num_splits < 1 || p.num_splits > kMaxIndexerSplits ||
      (p.num_splits > 1 && (!p.split_candidates || !p.split_counts))) {
    throw std::invalid_argument("select_compressed: splits must be 1 to " + std::to_string(kMaxIndexerSplits) +
                                ", past 1 with a candidate workspace");
  }
  const ScoreLayout layout(p.num_heads, p.head_dim, p.top_k);
  int device = 0, max_bytes = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&max_bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess) {
    throw std::runtime_error("select_compressed: cannot read the device's shared memory per block");
  }
  if (layout.bytes + static_cast<int>(sizeof(SelectShared)) > max_bytes) {
    throw std::invalid_argument("select_compressed: a query of " + std::to_string(p.num_heads) + " heads x " +
                                std::to_string(p.head_dim) + " dims needs more shared memory than a block has");
  }
  if (p.tokens.num_tokens == 0) return;
  const bool vector_loads = p.head_dim % 4 == 0 && p.state_dim % 4 == 0 && p.entry_offset % 4 == 0 &&
                            reinterpret_cast<uintptr_t>(p.states) % 16 == 0;
  set_shared_bytes(reinterpret_cast<const void*>(score_entries_kernel), layout.bytes);
  score_entries_kernel<<<dim3(p.tokens.num_tokens, p.num_splits), kThreads, layout.bytes, stream>>>(
      ScoreArgs{p, layout, vector_loads});
  if (p.num_splits == 1) return;
  const MergeArgs merge{p, candidate_capacity(p.top_k, kMergeRound)};
  const int merge_bytes = 2 * merge.capacity * static_cast<int>(sizeof(uint64_t));
  set_shared_bytes(reinterpret_cast<const void*>(merge_splits_kernel), merge_bytes);
  merge_splits_kernel<<<p.tokens.num_tokens, kThreads, merge_bytes, stream>>>(merge);
}

}  // namespace tern::kernels
