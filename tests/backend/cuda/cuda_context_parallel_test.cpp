// Decode context parallelism on one GPU, rank r of N played by a cache whose context shard is (r, N), against the
// CPU backend: the KV write (store_kv, and rope_store_kv with its rotation) fills exactly the slots kv_context_shard.h
// gives this rank's positions and nothing else; partial_attention's output and log-sum-exp over the rank's tokens,
// causal by global position, match the CPU's (decode rows, prefill chunks over cached context, first tokens that
// see no key of the rank, dense GQA heads and MLA's latent); merge_attention_partials matches the CPU's; and the
// GPU's partials of all N ranks, merged on the GPU, give the CPU's attention over the whole cache.
#include <limits>

#include "backend/kv_context_shard.h"
#include "cuda_test_util.h"

namespace tern {
namespace {

using testing::random_bf16_values;
using testing::relative_error;

constexpr float kNegativeInfinity = -std::numeric_limits<float>::infinity();

struct ShardCase {
  int heads, kv_heads, head_dim;
  int latent_rank;  // > 0: an MLA latent layer (one KV head of head_dim keys, values its first latent_rank dims)
  std::vector<std::pair<int, int>> sequences;  // (cached tokens, new tokens)
  int block_size;                               // slots per block of one rank's cache
  int ranks;
};

std::string describe(const ShardCase& c) {
  return fmt::format("{} heads over {} KV heads of {}{}, blocks of {}, {} ranks", c.heads, c.kv_heads, c.head_dim,
                     c.latent_rank ? fmt::format(" (latent {})", c.latent_rank) : "", c.block_size, c.ranks);
}

void PrintTo(const ShardCase& c, std::ostream* os) { *os << describe(c); }

std::vector<KvLayerSpec> layers_of(const ShardCase& c) {
  if (c.latent_rank == 0) return {{c.kv_heads, c.head_dim, c.head_dim}};
  KvLayerSpec spec{1, c.head_dim, 0};
  spec.kind = KvLayerKind::mla_latent;
  return {spec};
}

// The cache slot of every position of `batch` that `shard` holds, by its definition (kv_context_shard.h), for
// caches of `block_size` slots per block whose tables list logical blocks of block_size * shard.size tokens.
std::vector<std::pair<int64_t, int64_t>> held_slots(const ForwardBatch& batch, const KvContextShard& shard,
                                                    int64_t block_size) {
  std::vector<std::pair<int64_t, int64_t>> out;  // (token row of the batch, slot)
  int64_t row = 0;
  for (const auto& seq : batch.sequences) {
    for (int64_t i = 0; i < seq.num_new_tokens; ++i, ++row) {
      const int64_t position = seq.num_cached_tokens + i;
      if (!shard.holds(position)) continue;
      const int64_t block = seq.block_tables[0][position / shard.tokens_per_block(block_size)];
      out.emplace_back(row, shard.slot(block, position, block_size));
    }
  }
  return out;
}

// The GPU cache tensor holds each written row of `source` ([tokens, width]) at its slot and zeros elsewhere; the
// CPU cache holds the same rows at the same slots (its other slots are uninitialized memory).
void expect_rows_at_slots(const std::vector<float>& gpu_cache, const std::vector<float>& cpu_cache,
                          const std::vector<float>& source, const std::vector<std::pair<int64_t, int64_t>>& slots,
                          int64_t width, double tolerance, const std::string& what) {
  std::vector<bool> written(gpu_cache.size() / width, false);
  for (const auto& [row, slot] : slots) {
    written[slot] = true;
    const std::vector<float> gpu(gpu_cache.begin() + slot * width, gpu_cache.begin() + (slot + 1) * width);
    const std::vector<float> cpu(cpu_cache.begin() + slot * width, cpu_cache.begin() + (slot + 1) * width);
    const std::vector<float> expected(source.begin() + row * width, source.begin() + (row + 1) * width);
    ASSERT_LE(relative_error(gpu, expected), tolerance) << what << ": token row " << row << " at slot " << slot;
    ASSERT_LE(relative_error(cpu, expected), tolerance) << what << " (CPU): token row " << row << " at slot " << slot;
  }
  for (size_t slot = 0; slot < written.size(); ++slot) {
    if (written[slot]) continue;
    for (int64_t d = 0; d < width; ++d) {
      ASSERT_EQ(gpu_cache[slot * width + d], 0.0f) << what << ": slot " << slot << " holds no token of this rank";
    }
  }
}

class CudaContextParallelTest : public testing::CudaVsCpuTest, public ::testing::WithParamInterface<ShardCase> {};

TEST_P(CudaContextParallelTest, PartialAttentionMatchesCpuAndMergesToWholeAttention) {
  const ShardCase& c = GetParam();
  const int ranks = c.ranks;
  // One table for all ranks, of logical blocks of block_size * ranks tokens.
  const testing::PagedSteps steps = testing::paged_steps(c.sequences, c.block_size * ranks);
  const std::vector<KvLayerSpec> layers = layers_of(c);
  const int kv_heads = c.latent_rank ? 1 : c.kv_heads;
  const int value_dim = c.latent_rank ? c.latent_rank : c.head_dim;
  const int64_t key_row = int64_t{kv_heads} * c.head_dim;
  const int64_t fill_tokens = steps.fill.num_tokens();
  const auto k_values = random_bf16_values(fill_tokens * key_row, 1);
  const auto v_values = random_bf16_values(fill_tokens * key_row, 2);
  const auto k = input(k_values, {fill_tokens, kv_heads, c.head_dim});
  const auto v = c.latent_rank ? k : input(v_values, {fill_tokens, kv_heads, c.head_dim});
  const int64_t tokens = steps.step.num_tokens();
  // Queries scaled so that softmax is peaked enough for errors in the weights to show.
  const auto q = input(random_bf16_values(tokens * c.heads * c.head_dim, 3, 2.0f), {tokens, c.heads, c.head_dim});
  AttentionParams params;
  params.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  params.values_from_keys = c.latent_rank;

  // The reference: the CPU's attention over one unsharded cache under the same tables.
  std::vector<float> whole;
  {
    KvCache cache = cpu->allocate_kv_cache(layers, steps.num_blocks, c.block_size * ranks);
    cpu->store_kv(cache, 0, k.cpu, v.cpu, *cpu->begin_step(steps.fill));
    whole = cpu->to_host_f32(cpu->attention(q.cpu, cache, 0, params, *cpu->begin_step(steps.step)));
  }

  // Gathered as the ranks' all_gather_columns lay them out: [tokens, heads, ranks, dim] and [tokens, heads, ranks].
  const int64_t rows = tokens * c.heads;
  std::vector<float> outs(static_cast<size_t>(rows * ranks * value_dim));
  std::vector<float> lses(static_cast<size_t>(rows * ranks));
  for (int rank = 0; rank < ranks; ++rank) {
    const std::string label = describe(c) + ", rank " + std::to_string(rank);
    KvCache cpu_cache = cpu->allocate_kv_cache(layers, steps.num_blocks, c.block_size);
    KvCache gpu_cache = gpu->allocate_kv_cache(layers, steps.num_blocks, c.block_size);
    cpu_cache.context_shard = gpu_cache.context_shard = {rank, ranks};
    {
      const auto cpu_fill = cpu->begin_step(steps.fill);
      const auto gpu_fill = gpu->begin_step(steps.fill);
      cpu->store_kv(cpu_cache, 0, k.cpu, v.cpu, *cpu_fill);
      gpu->store_kv(gpu_cache, 0, k.gpu, v.gpu, *gpu_fill);
    }
    const auto slots = held_slots(steps.fill, cpu_cache.context_shard, c.block_size);
    expect_rows_at_slots(gpu->to_host_f32(gpu_cache.keys[0]), cpu->to_host_f32(cpu_cache.keys[0]), k_values, slots,
                         key_row, 0.0, label + ", keys");
    if (!c.latent_rank) {
      expect_rows_at_slots(gpu->to_host_f32(gpu_cache.values[0]), cpu->to_host_f32(cpu_cache.values[0]), v_values,
                           slots, key_row, 0.0, label + ", values");
    }

    const auto cpu_step = cpu->begin_step(steps.step);
    const auto gpu_step = gpu->begin_step(steps.step);
    const AttentionPartial expected = cpu->partial_attention(q.cpu, cpu_cache, 0, params, *cpu_step);
    const AttentionPartial actual = gpu->partial_attention(q.gpu, gpu_cache, 0, params, *gpu_step);
    ASSERT_EQ(actual.out.shape, (std::vector<int64_t>{tokens, c.heads, value_dim})) << label;
    ASSERT_EQ(actual.lse.shape, (std::vector<int64_t>{tokens, c.heads})) << label;
    ASSERT_EQ(actual.out.dtype, DType::F32) << label;
    const auto expected_out = cpu->to_host_f32(expected.out);
    const auto expected_lse = cpu->to_host_f32(expected.lse);
    const auto actual_out = gpu->to_host_f32(actual.out);
    const auto actual_lse = gpu->to_host_f32(actual.lse);
    EXPECT_LE(relative_error(actual_out, expected_out), 2e-2) << label;
    for (int64_t r = 0; r < rows; ++r) {
      const std::string row_label = label + ": token " + std::to_string(r / c.heads) + " head " +
                                    std::to_string(r % c.heads);
      if (expected_lse[r] == kNegativeInfinity) {
        ASSERT_EQ(actual_lse[r], kNegativeInfinity) << row_label << " sees no key of this rank";
      } else {
        ASSERT_NEAR(actual_lse[r], expected_lse[r], 1e-2 + 1e-3 * std::abs(expected_lse[r])) << row_label;
      }
      const std::vector<float> a(actual_out.begin() + r * value_dim, actual_out.begin() + (r + 1) * value_dim);
      const std::vector<float> b(expected_out.begin() + r * value_dim, expected_out.begin() + (r + 1) * value_dim);
      ASSERT_LE(relative_error(a, b), 5e-2) << row_label;
      lses[r * ranks + rank] = actual_lse[r];
      std::copy(a.begin(), a.end(), outs.begin() + (r * ranks + rank) * value_dim);
    }
  }

  const Tensor merged = gpu->merge_attention_partials(gpu->from_host_f32(outs, {tokens, c.heads, ranks, value_dim}),
                                                      gpu->from_host_f32(lses, {tokens, c.heads, ranks}));
  const auto actual = gpu->to_host_f32(merged);
  ASSERT_EQ(actual.size(), whole.size()) << describe(c);
  EXPECT_LE(relative_error(actual, whole), 2e-2) << describe(c);
  for (int64_t r = 0; r < rows; ++r) {
    const std::vector<float> a(actual.begin() + r * value_dim, actual.begin() + (r + 1) * value_dim);
    const std::vector<float> b(whole.begin() + r * value_dim, whole.begin() + (r + 1) * value_dim);
    ASSERT_LE(relative_error(a, b), 5e-2) << describe(c) << ", merged: token " << r / c.heads << " head "
                                          << r % c.heads;
  }
}

// Decodes over short and long contexts (several split-KV shares), first tokens (position 0 < rank: no key of
// the ranks above 0), short chunks, and prefill chunks with and without cached context: all of a rank's tokens
// go through the split-KV kernels under a shard.
const std::vector<std::pair<int, int>> kMixed = {{0, 1}, {1, 1}, {300, 1}, {2100, 1}, {5, 3}, {0, 200}, {100, 37}};
const std::vector<std::pair<int, int>> kPrefills = {{0, 130}, {257, 64}, {3, 9}, {1000, 1}};

INSTANTIATE_TEST_SUITE_P(
    Shapes, CudaContextParallelTest,
    ::testing::Values(ShardCase{4, 2, 16, 0, kMixed, 16, 2},        // the fixture models' shape
                      ShardCase{4, 2, 16, 0, kMixed, 16, 4},
                      ShardCase{32, 8, 128, 0, kMixed, 16, 2},      // Llama-3-8B, tensor-core kernel
                      ShardCase{32, 8, 128, 0, kMixed, 16, 4},
                      ShardCase{16, 2, 64, 0, kPrefills, 5, 2},     // blocks that cut key tiles anywhere
                      ShardCase{8, 8, 64, 0, kPrefills, 32, 4},     // MHA
                      ShardCase{16, 1, 128, 0, kPrefills, 7, 3},    // MQA, a group of 3
                      ShardCase{8, 2, 256, 0, kMixed, 16, 2},       // CUDA-core kernel
                      ShardCase{4, 1, 40, 32, kMixed, 16, 2},       // the MLA fixture's latent
                      ShardCase{16, 1, 576, 512, kPrefills, 64, 2},  // DeepSeek-V3's latent, a rank's 16 heads
                      ShardCase{16, 1, 576, 512, kMixed, 1, 4}));

// merge_attention_partials against the CPU's: rows where some ranks hold no key (-inf), where one rank dominates,
// and where the log-sum-exps are large (exp would overflow without the shift by the maximum).
TEST_F(CudaContextParallelTest, MergeMatchesCpu) {
  const int tokens = 5, heads = 3, ranks = 4, dim = 24;
  auto outs = random_bf16_values(tokens * heads * ranks * dim, 5);
  auto lses = random_bf16_values(tokens * heads * ranks, 6, 3.0f);
  for (int r = 0; r < tokens * heads; ++r) {
    if (r % 3 == 0) lses[r * ranks + 1] = kNegativeInfinity;
    if (r % 5 == 0) lses[r * ranks + 0] = lses[r * ranks + 3] = kNegativeInfinity;
    if (r % 4 == 1) lses[r * ranks + 2] += 200.0f;
    if (r % 7 == 2) {
      for (int k = 0; k < ranks; ++k) lses[r * ranks + k] += 90.0f;
    }
  }
  const std::vector<int64_t> out_shape = {tokens, heads, ranks, dim}, lse_shape = {tokens, heads, ranks};
  const auto expected = cpu->to_host_f32(
      cpu->merge_attention_partials(cpu->from_host_f32(outs, out_shape), cpu->from_host_f32(lses, lse_shape)));
  const Tensor merged =
      gpu->merge_attention_partials(gpu->from_host_f32(outs, out_shape), gpu->from_host_f32(lses, lse_shape));
  ASSERT_EQ(merged.shape, (std::vector<int64_t>{tokens, heads, dim}));
  const auto actual = gpu->to_host_f32(merged);
  for (int r = 0; r < tokens * heads; ++r) {
    const std::vector<float> a(actual.begin() + r * dim, actual.begin() + (r + 1) * dim);
    const std::vector<float> b(expected.begin() + r * dim, expected.begin() + (r + 1) * dim);
    ASSERT_LE(relative_error(a, b), 1e-2) << "row " << r;  // the GPU's output is bf16
  }
  // No rank holds a key: zero, as on the CPU.
  const std::vector<float> none(ranks, kNegativeInfinity);
  const auto empty = gpu->to_host_f32(gpu->merge_attention_partials(
      gpu->from_host_f32(std::vector<float>(ranks * 4, 1.0f), {1, 1, ranks, 4}), gpu->from_host_f32(none, {1, 1, ranks})));
  EXPECT_EQ(empty, std::vector<float>(4, 0.0f));
  EXPECT_THROW(gpu->merge_attention_partials(gpu->from_host_f32(outs, {tokens, heads, ranks * dim}),
                                             gpu->from_host_f32(lses, lse_shape)),
               Error);
}

// rope_store_kv under a shard: every query is rotated (those of other ranks' positions too), and only this rank's
// positions' rotated keys and values are written, at their slots; rotate-half pairs (the vectorized kernel) and
// interleaved pairs (the scalar one).
TEST_F(CudaContextParallelTest, RopeStoreKvWritesOnlyTheRanksTokens) {
  const int heads = 8, kv_heads = 2, head_dim = 64, block_size = 4, ranks = 2;
  const testing::PagedSteps steps = testing::paged_steps({{0, 37}, {0, 9}, {0, 1}}, block_size * ranks);
  const std::vector<KvLayerSpec> layers = {{kv_heads, head_dim, head_dim}};
  const int64_t tokens = steps.fill.num_tokens();
  const int64_t key_row = kv_heads * head_dim;
  const std::vector<float> inv_freq = testing::rope_inv_freq(head_dim);
  RopeTable cpu_table, gpu_table;
  cpu_table.inv_freq = cpu->from_host_f32(inv_freq, {head_dim / 2});
  gpu_table.inv_freq = gpu->from_host_f32(inv_freq, {head_dim / 2});
  cpu_table.rotary_dim = gpu_table.rotary_dim = head_dim;
  const auto v_values = random_bf16_values(tokens * key_row, 12);
  const auto v = input(v_values, {tokens, kv_heads, head_dim});
  for (int run = 0; run < 2 * ranks; ++run) {
    const int rank = run % ranks;
    cpu_table.interleaved = gpu_table.interleaved = run >= ranks;
    const std::string label = "rank " + std::to_string(rank) + " of " + std::to_string(ranks) +
                              (cpu_table.interleaved ? ", interleaved pairs" : ", rotate-half pairs");
    auto q = input(random_bf16_values(tokens * heads * head_dim, 10), {tokens, heads, head_dim});
    auto k = input(random_bf16_values(tokens * key_row, 11), {tokens, kv_heads, head_dim});
    KvCache cpu_cache = cpu->allocate_kv_cache(layers, steps.num_blocks, block_size);
    KvCache gpu_cache = gpu->allocate_kv_cache(layers, steps.num_blocks, block_size);
    cpu_cache.context_shard = gpu_cache.context_shard = {rank, ranks};
    const auto cpu_step = cpu->begin_step(steps.fill);
    const auto gpu_step = gpu->begin_step(steps.fill);
    cpu->rope_store_kv(q.cpu, k.cpu, v.cpu, {}, cpu_table, cpu_cache, 0, *cpu_step);
    gpu->rope_store_kv(q.gpu, k.gpu, v.gpu, {}, gpu_table, gpu_cache, 0, *gpu_step);
    EXPECT_LE(relative_error(gpu->to_host_f32(q.gpu), cpu->to_host_f32(q.cpu)), 1e-2) << label << ", queries";
    // The CPU rotated its key input in place: the rows the cache must hold.
    const auto rotated_keys = cpu->to_host_f32(k.cpu);
    const auto slots = held_slots(steps.fill, cpu_cache.context_shard, block_size);
    ASSERT_EQ(slots.size(), static_cast<size_t>(rank == 0 ? 19 + 5 + 1 : 18 + 4)) << label;
    expect_rows_at_slots(gpu->to_host_f32(gpu_cache.keys[0]), cpu->to_host_f32(cpu_cache.keys[0]), rotated_keys,
                         slots, key_row, 1e-2, label + ", keys");
    expect_rows_at_slots(gpu->to_host_f32(gpu_cache.values[0]), cpu->to_host_f32(cpu_cache.values[0]), v_values,
                         slots, key_row, 0.0, label + ", values");
  }
}

}  // namespace
}  // namespace tern
