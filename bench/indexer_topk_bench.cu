// DeepSeek-V4 Lightning Indexer top-k benchmark on random data (v4/indexer_topk.h): V4-Flash's indexer (64 heads
// of 128, top 512 of entries compressed 4:1) for 1, 16 and 128 decode tokens, each of its own sequence, at 8K, 32K
// and 256K entries (candidates) per token, and prefill steps of 8,192 tokens (at up to 2K and at 123K-131K
// context); the whole op (scoring and exact selection) in microseconds per call and per query row, with the
// scoring's float32 TFLOP/s and the time the entries take to read at the device-to-device copy bandwidth measured
// in the same run (medians of graph replays). Then the top-k alone (elementwise/row_topk.h) on float32 rows of
// normal values, the rows of scripts/gpu/topk_reference.py's torch.topk: timed like it, one launch between CUDA
// events, and as graph replays.
// Fixed seeds. Usage: indexer_topk_bench [--quick]
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "cuda_bench.cuh"
#include "elementwise/row_topk.h"
#include "v4/indexer_topk.h"

using namespace tern::kernels;
using tern::bench::check;
using tern::bench::device_alloc;
using tern::bench::graph_median_ms;
using tern::bench::median_ms;
using tern::bench::print_device_and_copy_anchor;
using tern::bench::random_bf16;

namespace {

constexpr int kRate = 4;
constexpr int kBlockSize = 64;
constexpr int kStateDim = 128;
constexpr int kTopK = 512;

__global__ void fill_random_f32(float* out, size_t count, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < count; i += size_t{gridDim.x} * blockDim.x) {
    out[i] = tern::bench::hashed_value(i, seed);
  }
}

template <typename T>
T* upload(const std::vector<T>& v) {
  T* p = device_alloc<T>(v.size());
  check(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice), "upload");
  return p;
}

// One sequence's cache of `max_entries` closed windows in shuffled blocks; every token of a step reads it.
struct Cache {
  float* states = nullptr;
  int32_t* block_table = nullptr;
  int32_t* zero_offsets = nullptr;  // every sequence's table is this one
  int max_tokens = 0;
};

Cache make_cache(int max_entries, int max_tokens) {
  Cache c;
  const int num_blocks = (max_entries * kRate + kBlockSize - 1) / kBlockSize;
  const size_t elems = size_t(num_blocks) * kBlockSize * kStateDim;
  c.states = device_alloc<float>(elems);
  fill_random_f32<<<1024, 256>>>(c.states, elems, 7);
  check(cudaGetLastError(), "fill_random_f32");
  std::vector<int32_t> order(num_blocks);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937(1));
  c.block_table = upload(order);
  c.zero_offsets = upload(std::vector<int32_t>(max_tokens, 0));
  c.max_tokens = max_tokens;
  return c;
}

// Times select_compressed for tokens at `positions` (token i of sequence i unless one_sequence).
void bench(const char* label, const Cache& cache, const std::vector<int32_t>& positions, bool one_sequence,
           int heads, int head_dim, int num_sms, double copy_tbs, int reps) {
  const int num_tokens = static_cast<int>(positions.size());
  std::vector<int32_t> token_seq(num_tokens, 0);
  if (!one_sequence) std::iota(token_seq.begin(), token_seq.end(), 0);
  SelectCompressedParams p;
  p.query = random_bf16(size_t(num_tokens) * heads * head_dim, 21);
  p.head_weights = random_bf16(size_t(num_tokens) * heads, 22);
  p.states = cache.states;
  p.state_dim = kStateDim;
  p.num_heads = heads;
  p.head_dim = head_dim;
  p.compress_rate = kRate;
  p.top_k = kTopK;
  p.softmax_scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  p.weights_scale = 1.0f / std::sqrt(static_cast<float>(heads));
  p.selected = device_alloc<int32_t>(size_t(num_tokens) * kTopK);
  p.tokens.positions = upload(positions);
  p.tokens.token_seq = upload(token_seq);
  p.tokens.block_tables = cache.block_table;
  p.tokens.block_table_offsets = cache.zero_offsets;
  p.tokens.block_size = kBlockSize;
  p.tokens.num_tokens = num_tokens;
  p.num_splits = indexer_topk_splits(num_tokens, num_sms);
  p.score_stride = ((*std::max_element(positions.begin(), positions.end()) + 1) / kRate + 3) / 4 * 4;
  p.score_rows = num_tokens;
  p.scores = device_alloc<float>(size_t(num_tokens) * p.score_stride);
  p.row_lengths = device_alloc<int32_t>(num_tokens);
  cudaStream_t stream;
  check(cudaStreamCreate(&stream), "cudaStreamCreate");
  const int calls = 5;
  const double ms = graph_median_ms([&](int) { launch_select_compressed(p, stream); }, calls, 2, reps, stream);
  double entries = 0;
  for (int32_t pos : positions) entries += (pos + 1) / kRate;
  const double tflops = 2.0 * entries * heads * head_dim / (ms * 1e-3) / 1e12;
  const double read_us = entries * head_dim * 4 / (copy_tbs * 1e12 / 2) * 1e6;  // copy_tbs counts read + write
  std::printf("%-8s tokens=%5d entries/token<=%6d heads=%d d=%d splits=%3d: %9.1f us, %8.2f us/row, %5.1f TFLOP/s, "
              "entries at copy speed %.1f us\n",
              label, num_tokens, (positions.back() + 1) / kRate, heads, head_dim, p.num_splits, ms * 1e3,
              ms * 1e3 / num_tokens, tflops, read_us);
  check(cudaStreamDestroy(stream), "cudaStreamDestroy");
  for (const void* ptr : {static_cast<const void*>(p.query), static_cast<const void*>(p.head_weights),
                          static_cast<const void*>(p.selected), static_cast<const void*>(p.tokens.positions),
                          static_cast<const void*>(p.tokens.token_seq), static_cast<const void*>(p.scores),
                          static_cast<const void*>(p.row_lengths)}) {
    check(cudaFree(const_cast<void*>(ptr)), "cudaFree");
  }
}

// Top kTopK of `rows` rows of `length` normal floats: one launch between events (as torch.topk is timed), and
// graph replays.
void bench_row_topk(int rows, int length, int reps) {
  std::vector<float> host(size_t(rows) * length);
  std::mt19937 rng(static_cast<uint32_t>(rows * 7919 + length));
  std::normal_distribution<float> normal;
  for (float& x : host) x = normal(rng);
  RowTopkParams p;
  p.values = upload(host);
  p.row_stride = length;
  p.length = length;
  p.num_rows = rows;
  p.k = kTopK;
  p.out = device_alloc<int32_t>(size_t(rows) * kTopK);
  cudaStream_t stream;
  check(cudaStreamCreate(&stream), "cudaStreamCreate");
  const double eager_ms = median_ms([&] { launch_row_topk(p, stream); }, 3, reps, stream);
  const double graph_ms = graph_median_ms([&](int) { launch_row_topk(p, stream); }, 5, 2, reps, stream);
  std::printf("row_topk rows=%4d candidates=%7d k=%d: %8.1f us, %8.2f us/row (one launch); %8.1f us, %8.2f us/row "
              "(graph replays)\n",
              rows, length, kTopK, eager_ms * 1e3, eager_ms * 1e3 / rows, graph_ms * 1e3, graph_ms * 1e3 / rows);
  check(cudaStreamDestroy(stream), "cudaStreamDestroy");
  check(cudaFree(const_cast<float*>(p.values)), "cudaFree");
  check(cudaFree(p.out), "cudaFree");
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  const int reps = quick ? 5 : 20;
  const double copy_tbs = print_device_and_copy_anchor();
  int num_sms = 0;
  check(cudaDeviceGetAttribute(&num_sms, cudaDevAttrMultiProcessorCount, 0), "cudaDeviceGetAttribute");
  std::printf("indexer: top %d of entries compressed %d:1, float32 state rows, blocks of %d in shuffled order\n",
              kTopK, kRate, kBlockSize);
  const int max_tokens = 8192;
  const Cache cache = make_cache(256 * 1024, max_tokens);
  for (const int entries : {8 * 1024, 32 * 1024, 256 * 1024}) {
    for (const int tokens : {1, 16, 128}) {
      const std::vector<int32_t> positions(tokens, entries * kRate - 1);
      bench("decode", cache, positions, false, 64, 128, num_sms, copy_tbs, reps);
      bench("select", cache, positions, false, 1, 4, num_sms, copy_tbs, reps);
    }
  }
  // A prefill step as the kernel trace saw it: 8,192 tokens of one sequence, up to 2,048 entries each.
  std::vector<int32_t> prefill(max_tokens);
  std::iota(prefill.begin(), prefill.end(), 0);
  bench("prefill", cache, prefill, true, 64, 128, num_sms, copy_tbs, quick ? 3 : reps);
  // The last 8,192-token chunk of a 131,072-token prompt: each token scores about 32K entries.
  std::iota(prefill.begin(), prefill.end(), 131072 - max_tokens);
  bench("prefill", cache, prefill, true, 64, 128, num_sms, copy_tbs, quick ? 3 : reps);
  for (const int candidates : {8192, 32768, 262144}) {
    for (const int rows : {1, 16, 128}) bench_row_topk(rows, candidates, reps);
  }
  return 0;
}
