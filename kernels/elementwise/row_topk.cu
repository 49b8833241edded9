#include <cuda_fp16.h>

#include <stdexcept>
#include <string>

#include "common/dependent_launch.cuh"
#include "elementwise/row_topk.h"

namespace tern::kernels {

namespace {

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;
constexpr int kUnroll = 8;  // loads in flight per thread in a pass over the row
constexpr int kBins = 1 << 11;
static_assert(kBins % kThreads == 0, "whole bins per thread");
// The k-th value's coarse bucket goes to shared memory when it holds at most this many values.
constexpr int kCandidates = 6144;
constexpr size_t kDynamicBytes = (kMaxRowTopK + kCandidates) * sizeof(uint64_t);

// Unsigned order of the key is the float order, NaN above all, -0 equal to +0 (the CPU indexer's ranks_ahead).
__device__ __forceinline__ uint32_t order_key(float value) {
  if (value != value) return 0xffffffffu;
  uint32_t bits = __float_as_uint(value);
  if (bits == 0x80000000u) bits = 0;
  return bits & 0x80000000u ? ~bits : bits | 0x80000000u;
}

// A bucket of 2048 that never decreases with the value: the top 11 bits of the order key of the value rounded to
// half precision (sign, 5 exponent and 5 mantissa bits: 32 buckets an octave, where float32's top 11 bits give
// 4), NaN in the top one. Rounding to nearest is monotonic, so a higher bucket always holds larger values.
__device__ __forceinline__ int coarse_bucket(float value) {
  if (value != value) return kBins - 1;
  uint32_t bits = __half_as_ushort(__float2half_rn(value));
  if (bits == 0x8000u) bits = 0;
  const uint32_t key = bits & 0x8000u ? ~bits & 0xffffu : bits | 0x8000u;
  return static_cast<int>(key >> 5);
}

// Larger is better: the key, then the lower index. Never 0 (the smallest key, -inf's, is 0x007fffff), so 0 pads.
__device__ __forceinline__ uint64_t ranked(uint32_t key, int index) {
  return uint64_t{key} << 32 | static_cast<uint32_t>(~index);
}

struct Shared {
  unsigned hist[kBins];
  int warp_sums[kWarps];
  uint64_t prefix;
  int bin, above, in_bin;  // find_bin's answer
  int count;               // winners so far
  int num_candidates;
};

// Inclusive sum of one value per thread over the block; *total gets the block's sum. The caller separates two calls
// by a barrier.
__device__ int block_inclusive_scan(int v, int* warp_sums, int* total) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
  for (int offset = 1; offset < 32; offset *= 2) {
    const int other = __shfl_up_sync(0xffffffffu, v, offset);
    if (lane >= offset) v += other;
  }
  if (lane == 31) warp_sums[warp] = v;
  __syncthreads();
  int sum = 0;
  for (int w = 0; w < kWarps; ++w) {
    if (w < warp) v += warp_sums[w];
    sum += warp_sums[w];
  }
  *total = sum;
  return v;
}

// The bin of hist[0, bins) that holds the `remaining`-th largest value counted from the top: sh.bin, with sh.above
// values in higher bins and sh.in_bin in it. Each thread sums a run of bins, threads in descending bin order.
__device__ void find_bin(Shared& sh, int bins, int remaining) {
  const int per_thread = (bins + kThreads - 1) / kThreads, top = bins - 1 - static_cast<int>(threadIdx.x) * per_thread;
  int in_run = 0;
  for (int b = top; b > top - per_thread && b >= 0; --b) in_run += static_cast<int>(sh.hist[b]);
  int total = 0;
  int above = block_inclusive_scan(in_run, sh.warp_sums, &total) - in_run;
  for (int b = top; b > top - per_thread && b >= 0; --b) {
    const int in_bin = static_cast<int>(sh.hist[b]);
    if (above < remaining && remaining <= above + in_bin) {
      sh.bin = b;
      sh.above = above;
      sh.in_bin = in_bin;
    }
    above += in_bin;
  }
  __syncthreads();
}

// hist[bin] += 1 for every lane with bin >= 0, one shared atomic per distinct bin of the warp: where many values
// tie (the fallback below), one atomic per lane would serialize on one address. Every lane calls.
__device__ __forceinline__ void count_bin(unsigned* hist, int bin) {
  const unsigned peers = __match_any_sync(0xffffffffu, bin);
  if (bin >= 0 && threadIdx.x % 32 == __ffs(peers) - 1) atomicAdd(&hist[bin], __popc(peers));
}

// Writes x to dst[(*count)++] where `take`; every lane calls, one atomic per warp.
__device__ __forceinline__ void append(uint64_t x, bool take, uint64_t* dst, int* count) {
  const unsigned mask = __ballot_sync(0xffffffffu, take);
  if (mask == 0) return;
  const int lane = threadIdx.x % 32, leader = __ffs(mask) - 1;
  int base = 0;
  if (lane == leader) base = atomicAdd(count, __popc(mask));
  base = __shfl_sync(0xffffffffu, base, leader);
  if (take) dst[base + __popc(mask & ((1u << lane) - 1))] = x;
}

// A pass over a row a slice at a time, each thread with kUnroll loads of V consecutive values in flight (V = 4 where
// rows are 16-byte aligned: a block of one row is bound by the bytes it has in flight). Value i of a thread's slice
// is element index(base, i); past the row's end values are 0 and never looked at.
template <int V>
struct Slices {
  static constexpr int kValues = kUnroll * V;
  static constexpr int kSize = kThreads * kValues;

  __device__ static int index(int base, int i) {
    return base + ((i / V) * kThreads + static_cast<int>(threadIdx.x)) * V + i % V;
  }

  // With V = 4 a load past n stays inside the row's stride, a multiple of 4 (the launcher's check).
  __device__ static void load(const float* row, int n, int base, float (&v)[kValues]) {
#pragma unroll
    for (int j = 0; j < kUnroll; ++j) {
      const int first = index(base, j * V);
      if constexpr (V == 4) {
        const float4 q = first < n ? *reinterpret_cast<const float4*>(row + first) : make_float4(0, 0, 0, 0);
        v[4 * j] = q.x;
        v[4 * j + 1] = q.y;
        v[4 * j + 2] = q.z;
        v[4 * j + 3] = q.w;
      } else {
        v[j] = first < n ? row[first] : 0.0f;
      }
    }
  }
};

// Candidates up to this many are chosen by counting, each against all (a pass without barriers); more by radix.
constexpr int kCountedCandidates = 2048;

// Appends to `winners` the `need` best of the distinct candidates[0, count) (need < count). Few: a candidate is
// among them when fewer than `need` others rank above it. Many: a radix select on their 64-bit ranks, 8 bits a pass
// from the top, stopping once the bucket of the need-th is taken whole.
__device__ void take_best_candidates(Shared& sh, const uint64_t* candidates, int count, int need,
                                     uint64_t* winners) {
  if (count <= kCountedCandidates) {
    for (int base = 0; base < count; base += kThreads) {
      const int i = base + threadIdx.x;
      const uint64_t x = i < count ? candidates[i] : 0;
      int above = 0;
      if (i < count) {
        for (int j = 0; j < count; ++j) above += candidates[j] > x;
      }
      append(x, i < count && above < need, winners, &sh.count);
    }
    return;
  }
  uint64_t prefix = 0;
  int remaining = need;
  for (int shift = 56; shift >= 0; shift -= 8) {
    const uint64_t decided = shift == 56 ? 0 : ~uint64_t{0} << (shift + 8);
    for (int b = threadIdx.x; b < 256; b += kThreads) sh.hist[b] = 0;
    __syncthreads();
    for (int i = threadIdx.x; i < count; i += kThreads) {
      const uint64_t x = candidates[i];
      if ((x & decided) == prefix) atomicAdd(&sh.hist[(x >> shift) & 0xff], 1u);
    }
    __syncthreads();
    find_bin(sh, 256, remaining);
    prefix |= uint64_t(sh.bin) << shift;
    remaining -= sh.above;
    if (sh.in_bin == remaining) break;
  }
  // Every candidate at or above the prefix (lower bits 0) is one of the need best.
  for (int base = 0; base < count; base += kThreads) {
    const int i = base + threadIdx.x;
    append(i < count ? candidates[i] : 0, i < count && candidates[i] >= prefix, winners, &sh.count);
  }
}

// The exact top k over the whole row when the k-th value's coarse bucket is too full for shared memory (many equal
// or nearly equal values): the k-th key by three radix passes over the row (11, 11 and 10 bits of the float32 order
// key), then the winners, ties at the k-th key to the lowest indices.
template <int V>
__device__ void take_best_of_row(Shared& sh, const float* row, int n, int k, uint64_t* winners) {
  using S = Slices<V>;
  uint32_t prefix = 0;
  int remaining = k;
  bool exact = false;
  for (int digit = 0; digit < 3 && !exact; ++digit) {
    const int shift = digit == 0 ? 21 : digit == 1 ? 10 : 0, bits = digit == 2 ? 10 : 11, bins = 1 << bits;
    const uint32_t decided = digit == 0 ? 0u : ~0u << (shift + bits);
    for (int b = threadIdx.x; b < bins; b += kThreads) sh.hist[b] = 0;
    __syncthreads();
    for (int base = 0; base < n; base += S::kSize) {
      float v[S::kValues];
      S::load(row, n, base, v);
#pragma unroll
      for (int i = 0; i < S::kValues; ++i) {
        const uint32_t key = order_key(v[i]);
        const bool in = S::index(base, i) < n && (key & decided) == prefix;
        count_bin(sh.hist, in ? static_cast<int>((key >> shift) & (bins - 1)) : -1);
      }
    }
    __syncthreads();
    find_bin(sh, bins, remaining);
    prefix |= static_cast<uint32_t>(sh.bin) << shift;
    remaining -= sh.above;
    exact = sh.in_bin == remaining;  // the whole bucket is taken: every key at or above the prefix
  }
  const int tie_quota = exact ? 0 : remaining;  // keys equal to the k-th: the first ones by index
  int ties_before = 0;
  for (int base = 0; base < n; base += S::kSize) {
    float v[S::kValues];
    S::load(row, n, base, v);
#pragma unroll
    for (int j = 0; j < kUnroll; ++j) {  // a load's V values are consecutive, loads of consecutive threads too
      uint32_t keys[V];
      bool take[V], tie[V];
      int ties = 0;
#pragma unroll
      for (int e = 0; e < V; ++e) {
        const int i = S::index(base, j * V + e);
        keys[e] = order_key(v[j * V + e]);
        take[e] = i < n && (exact ? keys[e] >= prefix : keys[e] > prefix);
        tie[e] = i < n && keys[e] == prefix;
        ties += tie[e];
      }
      if (ties_before < tie_quota) {  // the same on every thread: a block-wide rank of this load's ties
        int in_load = 0;
        int rank = ties_before + block_inclusive_scan(ties, sh.warp_sums, &in_load) - ties;
#pragma unroll
        for (int e = 0; e < V; ++e) {
          if (tie[e]) take[e] = rank++ < tie_quota;
        }
        ties_before += in_load;
        __syncthreads();
      }
#pragma unroll
      for (int e = 0; e < V; ++e) append(ranked(keys[e], S::index(base, j * V + e)), take[e], winners, &sh.count);
    }
  }
}

// Writes the indices of winners[0, count) best first, then -1 up to k. The ranks are distinct, so each winner's place
// is the number of winners above it: count comparisons a winner against values every thread reads at once from
// shared memory, where a sorting network would wait at a barrier per stage.
__device__ void write_best_first(const uint64_t* winners, int count, int k, int32_t* out) {
  for (int i = threadIdx.x; i < count; i += kThreads) {
    const uint64_t x = winners[i];
    int place = 0;
    for (int j = 0; j < count; ++j) place += winners[j] > x;
    out[place] = static_cast<int>(~static_cast<uint32_t>(x));
  }
  for (int i = count + threadIdx.x; i < k; i += kThreads) out[i] = -1;
}

// One block per row. The coarse buckets of the values (one pass) find the k-th value's bucket; a second pass takes
// the values above it and gathers those in it to shared memory, where a radix select on their exact ranks finishes.
template <int V>
__global__ void __launch_bounds__(kThreads) row_topk_kernel(RowTopkParams p) {
  using S = Slices<V>;
  extern __shared__ uint64_t dynamic[];
  uint64_t* winners = dynamic;                     // [kMaxRowTopK]
  uint64_t* candidates = dynamic + kMaxRowTopK;    // [kCandidates]
  __shared__ Shared sh;
  wait_for_prior_grids();
  allow_dependent_grids();
  const int r = blockIdx.x;
  const float* row = p.values + r * p.row_stride;
  int n = p.row_lengths ? p.row_lengths[r] : p.length;
  n = n < 0 ? 0 : n > p.row_stride ? static_cast<int>(p.row_stride) : n;
  int32_t* out = p.out + static_cast<int64_t>(r) * p.k;
  if (threadIdx.x == 0) {
    sh.count = 0;
    sh.num_candidates = 0;
  }
  for (int b = threadIdx.x; b < kBins; b += kThreads) sh.hist[b] = 0;
  __syncthreads();
  if (n <= p.k) {
    for (int base = 0; base < n; base += kThreads) {
      const int i = base + threadIdx.x;
      append(i < n ? ranked(order_key(row[i]), i) : 0, i < n, winners, &sh.count);
    }
    __syncthreads();
    write_best_first(winners, n, p.k, out);
    return;
  }

  for (int base = 0; base < n; base += S::kSize) {
    float v[S::kValues];
    S::load(row, n, base, v);
#pragma unroll
    for (int i = 0; i < S::kValues; ++i) {
      if (S::index(base, i) < n) atomicAdd(&sh.hist[coarse_bucket(v[i])], 1u);
    }
  }
  __syncthreads();
  find_bin(sh, kBins, p.k);
  const int bucket = sh.bin, need = p.k - sh.above, in_bucket = sh.in_bin;
  if (in_bucket > kCandidates) {
    take_best_of_row<V>(sh, row, n, p.k, winners);
  } else {
    for (int base = 0; base < n; base += S::kSize) {
      float v[S::kValues];
      S::load(row, n, base, v);
#pragma unroll
      for (int j = 0; j < S::kValues; ++j) {
        const int i = S::index(base, j);
        const int c = i < n ? coarse_bucket(v[j]) : -1;
        const uint64_t x = ranked(order_key(v[j]), i);
        append(x, c > bucket, winners, &sh.count);
        append(x, c == bucket, candidates, &sh.num_candidates);
      }
    }
    __syncthreads();
    if (need == in_bucket) {
      for (int base = 0; base < in_bucket; base += kThreads) {
        const int i = base + threadIdx.x;
        append(i < in_bucket ? candidates[i] : 0, i < in_bucket, winners, &sh.count);
      }
    } else {
      take_best_candidates(sh, candidates, in_bucket, need, winners);
    }
  }
  __syncthreads();
  write_best_first(winners, p.k, p.k, out);
}

}  // namespace

void launch_row_topk(const RowTopkParams& p, cudaStream_t stream) {
  if (p.k <= 0 || p.k > kMaxRowTopK || p.num_rows < 0 || p.length < 0 || p.row_stride < 0 ||
      p.row_stride > INT32_MAX) {
    throw std::invalid_argument("row_topk: k must be 1 to " + std::to_string(kMaxRowTopK) +
                                ", rows, length and stride non-negative, a row's length below 2^31");
  }
  if (!p.row_lengths && p.length > p.row_stride) {
    throw std::invalid_argument("row_topk: rows of " + std::to_string(p.length) + " values in a stride of " +
                                std::to_string(p.row_stride));
  }
  if (p.num_rows == 0) return;
  const bool vectors = p.row_stride % 4 == 0 && reinterpret_cast<uintptr_t>(p.values) % 16 == 0;
  const auto kernel = vectors ? row_topk_kernel<4> : row_topk_kernel<1>;
  const cudaError_t err = cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel),
                                               cudaFuncAttributeMaxDynamicSharedMemorySize, kDynamicBytes);
  if (err != cudaSuccess) throw std::runtime_error(std::string("row_topk: ") + cudaGetErrorString(err));
  launch_dependent("row_topk", kernel, p.num_rows, kThreads, kDynamicBytes, stream, p);
}

}  // namespace tern::kernels
