#include <cfloat>
#include <stdexcept>

#include "elementwise/sample.h"

namespace tern::kernels {

namespace {

constexpr int kThreads = 512;
constexpr float kLog2e = 1.4426950408889634f;

// bf16 bits -> a key whose unsigned order is the values' order (NaNs aside): x >= y iff key(x) >= key(y).
__device__ __forceinline__ uint32_t order_key(__nv_bfloat16 v) {
  const uint32_t bits = __bfloat16_as_ushort(v);
  return (bits & 0x8000u) ? (~bits & 0xFFFFu) : (bits | 0x8000u);
}

template <typename T, typename Op>
__device__ T block_reduce(T value, Op op, T* scratch) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) value = op(value, __shfl_xor_sync(0xffffffffu, value, offset));
  __syncthreads();  // scratch may still be read by the previous reduction
  if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = value;
  __syncthreads();
  T total = scratch[0];
  for (int w = 1; w < kThreads / 32; ++w) total = op(total, scratch[w]);
  return total;
}

struct Sum {
  template <typename T>
  __device__ T operator()(T a, T b) const { return a + b; }
};
struct Max {
  template <typename T>
  __device__ T operator()(T a, T b) const { return a > b ? a : b; }
};

__global__ void __launch_bounds__(kThreads)
    sample_kernel(const __nv_bfloat16* logits, const RowSampling* rows, int32_t* out, int vocab) {
  __shared__ float float_scratch[kThreads / 32];
  __shared__ int int_scratch[kThreads / 32];
  const __nv_bfloat16* row = logits + static_cast<int64_t>(blockIdx.x) * vocab;
  const RowSampling p = rows[blockIdx.x];
  // Thread j owns the contiguous indices [j * chunk, (j + 1) * chunk), which the final scan needs.
  const int chunk = (vocab + kThreads - 1) / kThreads;
  const int begin = min(vocab, static_cast<int>(threadIdx.x) * chunk);
  const int end = min(vocab, begin + chunk);

  uint32_t local_max = 0;
  for (int i = begin; i < end; ++i) local_max = max(local_max, order_key(row[i]));
  const uint32_t max_key = static_cast<uint32_t>(block_reduce<int>(static_cast<int>(local_max), Max{}, int_scratch));
  float local_max_value = -FLT_MAX;
  for (int i = begin; i < end; ++i) local_max_value = fmaxf(local_max_value, __bfloat162float(row[i]));
  const float max_value = block_reduce<float>(local_max_value, Max{}, float_scratch);

  const bool greedy = p.temperature <= 0.0f;
  const float scale = greedy ? 0.0f : kLog2e / p.temperature;
  auto weight = [&](int i) { return exp2f((__bfloat162float(row[i]) - max_value) * scale); };
  auto count_at_least = [&](uint32_t key) {
    int n = 0;
    for (int i = begin; i < end; ++i) n += order_key(row[i]) >= key;
    return block_reduce<int>(n, Sum{}, int_scratch);
  };
  auto mass_at_least = [&](uint32_t key) {
    float m = 0.0f;
    for (int i = begin; i < end; ++i) m += order_key(row[i]) >= key ? weight(i) : 0.0f;
    return block_reduce<float>(m, Sum{}, float_scratch);
  };

  // Threshold key: every token with key >= threshold is kept.
  uint32_t threshold = 0;
  if (greedy) {
    threshold = max_key;
  } else {
    if (p.top_k > 0 && p.top_k < vocab) {
      // The largest key that still keeps at least top_k tokens (the k-th largest logit).
      uint32_t lo = 0, hi = 0x10000u;  // count(lo) >= k > count(hi)
      while (hi - lo > 1) {
        const uint32_t mid = (lo + hi) / 2;
        if (count_at_least(mid) >= p.top_k) lo = mid; else hi = mid;
      }
      threshold = lo;
    }
    if (p.top_p < 1.0f) {
      // The largest key whose kept mass still reaches top_p of the top-k set's mass.
      const float target = p.top_p * mass_at_least(threshold);
      uint32_t lo = threshold, hi = max_key + 1;  // mass(lo) >= target > mass(hi)
      while (hi - lo > 1) {
        const uint32_t mid = (lo + hi) / 2;
        if (mass_at_least(mid) >= target) lo = mid; else hi = mid;
      }
      threshold = lo;
    }
  }

  // A draft to verify: its weight, and the kept tokens' mass below without it (the residual's).
  const int draft = greedy || p.draft_id < 0 || p.draft_id >= vocab ? -1 : p.draft_id;
  const float draft_weight = draft >= 0 && order_key(row[draft]) >= threshold ? weight(draft) : 0.0f;
  const auto kept = [&](int i) { return i != draft && order_key(row[i]) >= threshold; };

  // Inverse CDF over the kept tokens in vocabulary order: an exclusive scan of the threads' kept mass.
  float partial = 0.0f;
  for (int i = begin; i < end; ++i) partial += kept(i) ? weight(i) : 0.0f;
  __shared__ float prefix[kThreads];
  prefix[threadIdx.x] = partial;
  __syncthreads();
  for (int offset = 1; offset < kThreads; offset <<= 1) {  // Hillis-Steele inclusive scan
    const float add = threadIdx.x >= offset ? prefix[threadIdx.x - offset] : 0.0f;
    __syncthreads();
    prefix[threadIdx.x] += add;
    __syncthreads();
  }
  const float total = prefix[kThreads - 1];
  // Kept with probability draft_weight / (total + draft_weight); a draft alone in the kept set always is.
  if (draft_weight > 0.0f && (total <= 0.0f || p.draft_uniform * (total + draft_weight) < draft_weight)) {
    if (threadIdx.x == 0) out[blockIdx.x] = draft;
    return;
  }
  const float before = prefix[threadIdx.x] - partial;
  const float target = greedy ? 0.0f : p.uniform * total;
  // The last thread with kept mass takes a target that rounding put at or past the total.
  const int last_with_mass = block_reduce<int>(partial > 0.0f ? static_cast<int>(threadIdx.x) : -1, Max{}, int_scratch);
  const bool owner = partial > 0.0f && before <= target &&
                     (target < before + partial || static_cast<int>(threadIdx.x) == last_with_mass);
  // Only one thread can own the target; ties of float sums resolve to the lower thread.
  const int chosen_thread = block_reduce<int>(owner ? -static_cast<int>(threadIdx.x) : -kThreads, Max{}, int_scratch);
  if (static_cast<int>(threadIdx.x) == -chosen_thread) {
    float acc = before;
    int pick = -1;
    for (int i = begin; i < end; ++i) {
      if (!kept(i)) continue;
      pick = i;
      acc += weight(i);
      if (acc > target) break;
    }
    out[blockIdx.x] = pick;
  }
  if (threadIdx.x == 0 && chosen_thread == -kThreads) out[blockIdx.x] = 0;  // no kept mass (a row of NaNs)
}

}  // namespace

void launch_sample_bf16(const __nv_bfloat16* logits, const RowSampling* rows, int32_t* out, int num_rows, int vocab,
                        cudaStream_t stream) {
  if (num_rows < 0 || vocab <= 0) throw std::invalid_argument("sample: rows need at least one logit");
  if (num_rows > 0) sample_kernel<<<num_rows, kThreads, 0, stream>>>(logits, rows, out, vocab);
}

}  // namespace tern::kernels
