// Attention kernel benchmark on random data: prefill (causal, paged) in TFLOP/s; split-KV decode in TB/s of KV read,
// against a device-to-device copy measured in the same run; the same for MLA (DeepSeek-V3's 128 heads over
// a 512 + 64 latent cache), decode also in TFLOP/s (128 heads make it compute-heavy).
// Medians of CUDA-event-timed launches after warm-up; fixed seeds. Usage: attention_bench [--quick]
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "attention/decode_attention.h"
#include "attention/mla_attention.h"
#include "attention/prefill_attention.h"
#include "cuda_bench.cuh"

using namespace tern::kernels;
using tern::bench::check;
using tern::bench::device_alloc;
using tern::bench::median_ms;
using tern::bench::print_device_and_copy_anchor;
using tern::bench::random_bf16;

namespace {

int32_t* upload(const std::vector<int32_t>& v) {
  auto* p = device_alloc<int32_t>(v.size());
  check(cudaMemcpy(p, v.data(), v.size() * sizeof(int32_t), cudaMemcpyHostToDevice), "upload");
  return p;
}

// A paged cache holding `seq_lens` tokens per sequence, blocks of 16 in shuffled order.
struct Batch {
  PagedKv kv;
  AttentionBatch batch;
  std::vector<int32_t> cu, cached, token_seq, positions;
  int num_tokens = 0;
};

Batch make_batch(const std::vector<int>& cached, const std::vector<int>& fresh, int kv_heads, int head_dim) {
  const int block_size = 16;
  Batch b;
  std::vector<int32_t> tables, offsets;
  int total_blocks = 0;
  for (size_t s = 0; s < cached.size(); ++s) total_blocks += (cached[s] + fresh[s] + block_size - 1) / block_size;
  std::vector<int32_t> order(total_blocks);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937(1));
  b.cu.push_back(0);
  int next = 0;
  for (size_t s = 0; s < cached.size(); ++s) {
    offsets.push_back(static_cast<int32_t>(tables.size()));
    for (int i = 0; i < (cached[s] + fresh[s] + block_size - 1) / block_size; ++i) tables.push_back(order[next++]);
    b.cu.push_back(b.cu.back() + fresh[s]);
    b.cached.push_back(cached[s]);
    for (int i = 0; i < fresh[s]; ++i) {
      b.token_seq.push_back(static_cast<int32_t>(s));
      b.positions.push_back(cached[s] + i);
    }
  }
  b.num_tokens = b.cu.back();
  const size_t cache_elems = size_t(total_blocks) * block_size * kv_heads * head_dim;
  b.kv.keys = random_bf16(cache_elems, 11);
  b.kv.values = random_bf16(cache_elems, 12);
  b.kv.block_size = block_size;
  b.kv.num_slots = int64_t{total_blocks} * block_size;
  b.kv.block_tables = upload(tables);
  b.kv.block_table_offsets = upload(offsets);
  b.batch = {upload(b.cu), upload(b.cached), upload(b.token_seq), upload(b.positions)};
  return b;
}

// The split-KV plan of `num_tokens` decode tokens (rows 0, 1, ...) with `num_splits` shares each, as the CUDA
// backend's step plan gives it to the decode and MLA kernels.
template <typename SplitKvParams>
void set_split_items(SplitKvParams& p, int num_tokens, int num_splits) {
  std::vector<int32_t> item_token, item_chunk, tokens, item_begin;
  for (int t = 0; t < num_tokens; ++t) {
    tokens.push_back(t);
    item_begin.push_back(static_cast<int32_t>(item_token.size()));
    for (int c = 0; c < num_splits; ++c) {
      item_token.push_back(t);
      item_chunk.push_back(c);
    }
  }
  item_begin.push_back(static_cast<int32_t>(item_token.size()));
  p.item_token = upload(item_token);
  p.item_chunk = upload(item_chunk);
  p.num_items = static_cast<int>(item_token.size());
  p.num_splits = num_splits;
  p.tokens = upload(tokens);
  p.token_item_begin = upload(item_begin);
  p.num_decode_tokens = num_tokens;
}

void bench_prefill(int num_seqs, int seq_len, int heads, int kv_heads, int head_dim, int reps) {
  const std::vector<int> cached(num_seqs, 0), fresh(num_seqs, seq_len);
  Batch b = make_batch(cached, fresh, kv_heads, head_dim);
  std::vector<std::pair<int, int>> tiles;
  for (int s = 0; s < num_seqs; ++s) {
    for (int r = 0; r < seq_len; r += kPrefillTileRows) tiles.emplace_back(s, r);
  }
  std::stable_sort(tiles.begin(), tiles.end(), [](auto x, auto y) { return x.second > y.second; });
  std::vector<int32_t> tile_seq, tile_row;
  for (auto [s, r] : tiles) {
    tile_seq.push_back(s);
    tile_row.push_back(r);
  }
  PrefillAttentionParams p;
  const size_t out_elems = size_t(b.num_tokens) * heads * head_dim;
  p.query = random_bf16(out_elems, 13);
  p.out = device_alloc<__nv_bfloat16>(out_elems);
  p.kv = b.kv;
  p.batch = b.batch;
  p.shape = {heads, kv_heads, head_dim, 1.0f / std::sqrt(float(head_dim)), 0, nullptr};
  p.tile_seq = upload(tile_seq);
  p.tile_row = upload(tile_row);
  p.num_tiles = static_cast<int>(tiles.size());
  // Causal: query i attends to i + 1 keys; 2 FLOPs per multiply-add, two matrix products (QK^T and PV).
  const double pairs = double(num_seqs) * seq_len * (seq_len + 1) / 2.0;
  auto report = [&](const char* kernel, double ms) {
    const double tflops = 4.0 * pairs * head_dim * heads / (ms * 1e-3) / 1e12;
    std::printf("prefill  %-8s seqs=%d len=%d heads=%d/%d d=%d causal: %.3f ms, %.1f TFLOP/s\n", kernel, num_seqs,
                seq_len, heads, kv_heads, head_dim, ms, tflops);
  };
  report("wgmma", median_ms([&] { launch_prefill_attention(p, nullptr); }, 3, reps));
}

// Decode over `context` keys for `batch` tokens, as the CUDA backend plans it (plan_decode_attention), or with
// `other_kernel` the kernel the plan did not choose, at its own share count (per KV head: decode_attention_num_splits;
// all heads: a block an SM), its output compared with the planned one's.
void bench_decode(int batch, int context, int heads, int kv_heads, int head_dim, double copy_tbs, int reps,
                  bool other_kernel = false) {
  int num_sms = 0;
  check(cudaDeviceGetAttribute(&num_sms, cudaDevAttrMultiProcessorCount, 0), "cudaDeviceGetAttribute");
  // Blocks of 16 tokens (make_batch): for head_dim 64 or 128 the whole-context kernel is the plan's to choose.
  const bool whole_context = decode_attention_whole_context_supports(head_dim, head_dim, 16);
  const DecodeAttentionPlan planned = plan_decode_attention(batch, {kv_heads, whole_context}, num_sms, context);
  DecodeAttentionPlan plan = planned;
  if (other_kernel) {
    plan.whole_context = false;
    plan.all_heads = !planned.all_heads;
    plan.num_splits = plan.all_heads ? decode_attention_all_heads_splits(batch, num_sms)
                                     : decode_attention_num_splits(batch, kv_heads, num_sms, context);
  }
  const std::vector<int> cached(batch, context - 1), fresh(batch, 1);
  // The steps' metadata for a share count; three caches, so that a run finds little of its KV in L2 when the one
  // before read another.
  const auto make_params = [&](const Batch& b, DecodeAttentionPlan with) {
    DecodeAttentionParams p;
    p.query = random_bf16(size_t(b.num_tokens) * heads * head_dim, 14);
    p.out = device_alloc<__nv_bfloat16>(size_t(b.num_tokens) * heads * head_dim);
    p.kv = b.kv;
    p.batch = b.batch;
    p.shape = {heads, kv_heads, head_dim, 1.0f / std::sqrt(float(head_dim)), 0, nullptr};
    set_split_items(p, b.num_tokens, with.num_splits);
    p.partial_out = device_alloc<float>(size_t(p.num_items) * heads * head_dim);
    p.partial_lse = device_alloc<float>(size_t(p.num_items) * heads);
    p.all_heads = with.all_heads;
    p.whole_context = with.whole_context;
    return p;
  };
  constexpr int kSets = 3;
  std::vector<Batch> batches;
  std::vector<DecodeAttentionParams> sets;
  for (int set = 0; set < kSets; ++set) {
    batches.push_back(make_batch(cached, fresh, kv_heads, head_dim));
    sets.push_back(make_params(batches.back(), plan));
  }
  cudaStream_t stream;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  // A launch alone between two events (the host's launch latency included), and as a recorded step runs it: 12
  // launches back to back in one graph.
  const double single_ms = median_ms([&] { launch_decode_attention(sets[0], stream); }, 3, reps, stream);
  constexpr int kCalls = 4 * kSets;
  const double ms = tern::bench::graph_median_ms([&](int i) { launch_decode_attention(sets[i % kSets], stream); },
                                                 kCalls, 3, reps, stream);
  char label[96] = "";
  if (other_kernel) {
    const size_t out_elems = size_t(batch) * heads * head_dim;
    std::vector<__nv_bfloat16> expected(out_elems), actual(out_elems);
    const DecodeAttentionParams reference = make_params(batches[0], planned);
    launch_decode_attention(reference, stream);
    check(cudaStreamSynchronize(stream), "compare");
    check(cudaMemcpy(expected.data(), reference.out, out_elems * 2, cudaMemcpyDeviceToHost), "copy");
    check(cudaMemcpy(actual.data(), sets[0].out, out_elems * 2, cudaMemcpyDeviceToHost), "copy");
    float max_diff = 0.0f;
    for (size_t i = 0; i < out_elems; ++i) {
      max_diff = std::max(max_diff, std::fabs(__bfloat162float(expected[i]) - __bfloat162float(actual[i])));
    }
    std::snprintf(label, sizeof label, " (not planned; %.1e from the planned output)", max_diff);
  }
  check(cudaStreamDestroy(stream), "cudaStreamDestroy");
  const double kv_bytes = double(batch) * context * kv_heads * head_dim * 2 /*K,V*/ * 2 /*bf16*/;
  const double tbs = kv_bytes / (ms * 1e-3) / 1e12;
  const double single_tbs = kv_bytes / (single_ms * 1e-3) / 1e12;
  std::printf("decode   batch=%d context=%d heads=%d/%d d=%d %s x %d%s: %.3f ms, %.2f TB/s KV read (%.0f%% of copy); "
              "a launch alone %.3f ms (%.0f%%)\n",
              batch, context, heads, kv_heads, head_dim, plan.all_heads ? "all heads" : "per KV head", plan.num_splits,
              label, ms, tbs, 100.0 * tbs / copy_tbs, single_ms, 100.0 * single_tbs / copy_tbs);
}

// MLA (mla_attention.h): `heads` query heads over one latent of `key_dim` per token, values its first
// `value_dim` dims. Prefill: one causal sequence; decode: `batch` tokens over `context` keys, shares as the backend
// plans them for MLA layers.
void bench_mla(bool prefill, int batch, int context, int heads, int key_dim, int value_dim, double copy_tbs,
               int reps) {
  int num_sms = 0;
  check(cudaDeviceGetAttribute(&num_sms, cudaDevAttrMultiProcessorCount, 0), "cudaDeviceGetAttribute");
  const std::vector<int> cached(batch, prefill ? 0 : context - 1), fresh(batch, prefill ? context : 1);
  Batch b = make_batch(cached, fresh, 1, key_dim);
  MlaAttentionParams p;
  p.query = random_bf16(size_t(b.num_tokens) * heads * key_dim, 15);
  p.out = device_alloc<__nv_bfloat16>(size_t(b.num_tokens) * heads * value_dim);
  p.kv = b.kv;
  p.batch = b.batch;
  p.num_heads = heads;
  p.key_dim = key_dim;
  p.value_dim = value_dim;
  p.scale = 1.0f / std::sqrt(192.0f);
  if (prefill) {
    std::vector<int32_t> tile_seq, tile_row;
    for (int s = 0; s < batch; ++s) {
      for (int r = context - 1 - (context - 1) % kPrefillTileRows; r >= 0; r -= kPrefillTileRows) {
        tile_seq.push_back(s);
        tile_row.push_back(r);
      }
    }
    p.tile_seq = upload(tile_seq);
    p.tile_row = upload(tile_row);
    p.num_tiles = static_cast<int>(tile_seq.size());
  } else {
    set_split_items(p, b.num_tokens, decode_attention_num_splits(batch, kMlaDecodeSplitHeads, num_sms, context));
    p.partial_out = device_alloc<float>(size_t(p.num_items) * heads * value_dim);
    p.partial_lse = device_alloc<float>(size_t(p.num_items) * heads);
  }
  const double ms = median_ms([&] { launch_mla_attention(p, nullptr); }, 3, reps);
  // 2 FLOPs per multiply-add of QK^T (key_dim) and PV (value_dim) for every visible (query head, key) pair.
  const double pairs = prefill ? double(batch) * context * (context + 1) / 2.0 : double(batch) * context;
  const double tflops = 2.0 * pairs * heads * (key_dim + value_dim) / (ms * 1e-3) / 1e12;
  if (prefill) {
    std::printf("mla prefill seqs=%d len=%d heads=%d d=%d/%d causal: %.3f ms, %.1f TFLOP/s\n", batch, context, heads,
                key_dim, value_dim, ms, tflops);
  } else {
    const double tbs = double(batch) * context * key_dim * 2 / (ms * 1e-3) / 1e12;
    std::printf("mla decode  batch=%d context=%d heads=%d d=%d/%d splits=%d: %.3f ms, %.2f TB/s latent read (%.0f%% of "
                "copy), %.1f TFLOP/s\n",
                batch, context, heads, key_dim, value_dim, p.num_splits, ms, tbs, 100.0 * tbs / copy_tbs, tflops);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  const int reps = quick ? 5 : 20;
  const double copy_tbs = print_device_and_copy_anchor();
  bench_prefill(1, 8192, 32, 8, 128, reps);
  bench_prefill(1, 8192, 32, 8, 64, reps);
  bench_prefill(4, 2048, 32, 8, 128, reps);
  bench_prefill(1, 16384, 16, 16, 128, reps);
  for (int batch : {1, 8, 32}) bench_decode(batch, 32768, 32, 8, 128, copy_tbs, reps);
  bench_decode(8, 32768, 64, 8, 128, copy_tbs, reps);
  bench_decode(8, 32768, 8, 8, 128, copy_tbs, reps);
  bench_decode(1, 32768, 32, 8, 64, copy_tbs, reps);
  // Head sizes and groups without a tensor-core kernel (the CUDA-core one): Phi-3's 96 (MHA), 80, 192, 256, and a
  // group of 20.
  for (int batch : {1, 32}) bench_decode(batch, 8192, 32, 32, 96, copy_tbs, reps);
  bench_decode(8, 8192, 32, 8, 80, copy_tbs, reps);
  bench_decode(8, 8192, 16, 4, 192, copy_tbs, reps);
  bench_decode(8, 8192, 16, 4, 256, copy_tbs, reps);
  bench_decode(8, 8192, 40, 2, 128, copy_tbs, reps);
  bench_mla(true, 1, 4096, 128, 576, 512, copy_tbs, reps);
  bench_mla(true, 1, 4096, 16, 576, 512, copy_tbs, reps);
  for (int batch : {1, 8, 32}) bench_mla(false, batch, 8192, 128, 576, 512, copy_tbs, reps);
  bench_mla(false, 64, 4096, 16, 576, 512, copy_tbs, reps);
  if (!quick) {
    // Both kernels where the plan switches between them.
    const std::pair<int, int> shapes[] = {{1, 32768}, {8, 32768}, {32, 32768}, {1, 4096}, {8, 4096}, {32, 4096},
                                          {1, 1024}, {8, 1024}, {32, 1024}, {128, 512}, {128, 1024}, {64, 512}};
    for (auto [batch, context] : shapes) {
      for (bool other : {false, true}) bench_decode(batch, context, 32, 8, 128, copy_tbs, reps, other);
    }
  }
  return 0;
}
