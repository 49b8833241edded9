// Decode context parallelism on the CPU backend: the token -> rank/slot mapping against its definition (each rank
// fills its slots of a logical block in position order), the log-sum-exp merge against a softmax over the union, and
// the ranks' partial attentions over their shares of a paged cache, merged, against dense causal attention.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <set>

#include "backend/backend.h"
#include "backend/kv_context_shard.h"
#include "attention_reference.h"
#include "core/error.h"

namespace tern {
namespace {

using testing::naive_attention;

TEST(KvContextShardTest, EachPositionLivesOnOneRankInTheNextFreeSlotOfItsBlock) {
  const int64_t block_size = 4;
  const std::vector<int32_t> table = {7, 2, 5};
  for (int size : {1, 2, 3, 4}) {
    const int64_t tokens_per_block = block_size * size;
    // Definition: rank r takes positions r, r + size, ... of each logical block, in order, into its own copy of the
    // block the table lists; the k-th of them goes to offset k.
    std::map<std::pair<int, int64_t>, int64_t> expected;  // (rank, position) -> slot
    for (int64_t b = 0; b < static_cast<int64_t>(table.size()); ++b) {
      std::vector<int64_t> next_offset(static_cast<size_t>(size), 0);
      for (int64_t p = b * tokens_per_block; p < (b + 1) * tokens_per_block; ++p) {
        const int rank = static_cast<int>(p % size);
        expected[{rank, p}] = table[b] * block_size + next_offset[rank]++;
      }
    }
    for (int64_t p = 0; p < static_cast<int64_t>(table.size()) * tokens_per_block; ++p) {
      int holders = 0;
      for (int rank = 0; rank < size; ++rank) {
        const KvContextShard shard{rank, size};
        if (!shard.holds(p)) continue;
        ++holders;
        EXPECT_EQ(shard.slot(table[p / tokens_per_block], p, block_size), (expected[{rank, p}]))
            << "position " << p << " on rank " << rank << " of " << size;
      }
      EXPECT_EQ(holders, 1) << "position " << p << " over " << size << " ranks";
    }
  }
}

TEST(KvContextShardTest, BatchSlotsGiveOtherRanksTokensNoSlot) {
  ForwardBatch batch;
  batch.token_ids.assign(7, 0);
  batch.sequences.push_back({5, 4, {{3, 8}}});  // positions 5..8, logical blocks of 8 tokens
  batch.sequences.push_back({0, 3, {{1}}});     // positions 0..2
  const KvContextShard rank1{1, 2};
  // Rank 1 holds odd positions: 5 -> block 3 offset 2, 7 -> block 3 offset 3; 1 -> block 1 offset 0.
  EXPECT_EQ(batch_slots(batch, 4, 0, rank1), (std::vector<int64_t>{14, -1, 15, -1, -1, 4, -1}));
  const KvContextShard rank0{0, 2};
  // Rank 0 holds even positions: 6 -> block 3 offset 3, 8 -> block 8 offset 0; 0 -> block 1 offset 0, 2 -> offset 1.
  EXPECT_EQ(batch_slots(batch, 4, 0, rank0), (std::vector<int64_t>{-1, 15, -1, 32, 4, -1, 5}));
  // One rank's blocks of 4 tokens: 9 positions need 3 blocks, the table lists 2.
  EXPECT_THROW(batch_slots(batch, 4), Error);
}

TEST(AttentionMergeTest, WeightsEachRankByItsLogSumExp) {
  auto backend = make_cpu_backend(2);
  // One row, three ranks: each holds scores s_j and values v_j (dim 2); rank 2 holds no token.
  const std::vector<std::vector<double>> scores = {{0.5, -1.0, 2.0}, {3.0}, {}};
  const std::vector<std::vector<std::array<double, 2>>> values = {{{1, 2}, {3, -1}, {0, 5}}, {{-2, 4}}, {}};
  std::vector<float> outs, lses;
  double all_total = 0.0;
  std::array<double, 2> all_acc = {0, 0};
  for (size_t r = 0; r < scores.size(); ++r) {
    double total = 0.0;
    std::array<double, 2> acc = {0, 0};
    for (size_t j = 0; j < scores[r].size(); ++j) {
      const double e = std::exp(scores[r][j]);
      total += e;
      for (int d = 0; d < 2; ++d) acc[d] += e * values[r][j][d];
    }
    all_total += total;
    for (int d = 0; d < 2; ++d) {
      all_acc[d] += acc[d];
      outs.push_back(total > 0 ? static_cast<float>(acc[d] / total) : 0.0f);
    }
    lses.push_back(total > 0 ? static_cast<float>(std::log(total)) : -std::numeric_limits<float>::infinity());
  }
  const auto merged = backend->to_host_f32(backend->merge_attention_partials(
      backend->from_host_f32(outs, {1, 1, 3, 2}), backend->from_host_f32(lses, {1, 1, 3})));
  ASSERT_EQ(merged.size(), 2u);
  for (int d = 0; d < 2; ++d) EXPECT_NEAR(merged[d], all_acc[d] / all_total, 1e-6);
  EXPECT_THROW(backend->merge_attention_partials(backend->from_host_f32(outs, {1, 3, 2}),
                                                 backend->from_host_f32(lses, {1, 1, 3})),
               Error);
}

class ContextParallelAttentionTest : public ::testing::TestWithParam<int> {};

// Two sequences, one with a cached prefix written in an earlier step, over `size` ranks' caches (one backend, a
// cache per rank): each rank stores only its tokens, and the merged partials equal dense attention.
TEST_P(ContextParallelAttentionTest, MergedPartialsMatchDenseAttention) {
  const int size = GetParam();
  const int num_heads = 4, num_kv_heads = 2, dim = 8, block_size = 2;
  auto backend = make_cpu_backend(2);
  // Logical blocks of block_size * size tokens; shuffled block ids.
  const std::vector<std::vector<int32_t>> tables = {{5, 1, 6, 0, 7, 9}, {3, 2, 4}};
  std::vector<KvCache> caches;
  for (int rank = 0; rank < size; ++rank) {
    caches.push_back(backend->allocate_kv_cache({{num_kv_heads, dim, dim}}, 10, block_size));
    caches.back().context_shard = {rank, size};
  }
  const auto a = testing::two_sequence_attention(num_heads, num_kv_heads, dim, {7, 0}, {4, 5}, tables);
  {
    auto step = backend->begin_step(a.prefix);
    for (auto& cache : caches) {
      backend->store_kv(cache, 0, backend->from_host_f32(a.prefix_k, {a.cached[0], num_kv_heads, dim}),
                        backend->from_host_f32(a.prefix_v, {a.cached[0], num_kv_heads, dim}), *step);
    }
  }
  auto step = backend->begin_step(a.step);
  const int num_tokens = a.num_tokens();
  const Tensor query = backend->from_host_f32(a.q, {num_tokens, num_heads, dim});
  AttentionParams params;
  params.scale = 1.0f / std::sqrt(float(dim));
  // Gathered as the ranks' all_gather_columns lay them out: [tokens, heads, ranks, dim] and [tokens, heads, ranks].
  std::vector<float> outs(static_cast<size_t>(num_tokens * num_heads * size * dim));
  std::vector<float> lses(static_cast<size_t>(num_tokens * num_heads * size));
  for (int rank = 0; rank < size; ++rank) {
    backend->store_kv(caches[rank], 0, backend->from_host_f32(a.k, {num_tokens, num_kv_heads, dim}),
                      backend->from_host_f32(a.v, {num_tokens, num_kv_heads, dim}), *step);
    const AttentionPartial partial = backend->partial_attention(query, caches[rank], 0, params, *step);
    const auto out = backend->to_host_f32(partial.out);
    const auto lse = backend->to_host_f32(partial.lse);
    for (int r = 0; r < num_tokens * num_heads; ++r) {
      lses[r * size + rank] = lse[r];
      std::copy(out.begin() + r * dim, out.begin() + (r + 1) * dim, outs.begin() + (r * size + rank) * dim);
    }
    if (size > 1) {
      EXPECT_THROW(backend->attention(query, caches[rank], 0, params, *step), Error);
    }
  }
  if (size > 1) {
    // Sequence 1's first query (position 0, row fresh[0]) sees one token, which rank 0 holds.
    for (int h = 0; h < num_heads; ++h) {
      EXPECT_EQ(lses[(a.fresh[0] * num_heads + h) * size + 1], -std::numeric_limits<float>::infinity());
    }
  }
  const auto merged = backend->to_host_f32(
      backend->merge_attention_partials(backend->from_host_f32(outs, {num_tokens, num_heads, size, dim}),
                                        backend->from_host_f32(lses, {num_tokens, num_heads, size})));
  size_t offset = 0;
  for (int s = 0; s < 2; ++s) {
    const auto expected = naive_attention(a.queries[s], a.full_k[s], a.full_v[s], a.fresh[s], num_heads, num_kv_heads,
                                          dim, a.cached[s]);
    for (size_t i = 0; i < expected.size(); ++i) {
      ASSERT_NEAR(merged[offset + i], expected[i], 1e-5) << "sequence " << s << " over " << size << " ranks";
    }
    offset += expected.size();
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, ContextParallelAttentionTest, ::testing::Values(1, 2, 3, 4));

}  // namespace
}  // namespace tern
