// CPU backend ops against naive double-precision definitions.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <thread>

#include "backend/backend.h"
#include "attention_reference.h"
#include "core/dtype.h"
#include "core/error.h"

namespace tern {
namespace {

using testing::naive_attention;
using testing::random_values;

TensorInfo host_view(const std::vector<uint16_t>& data, std::vector<int64_t> shape) {
  TensorInfo info;
  info.name = "w";
  info.dtype = DType::BF16;
  info.shape = std::move(shape);
  info.data = reinterpret_cast<const std::byte*>(data.data());
  info.size_bytes = data.size() * 2;
  return info;
}

class CpuOpsTest : public ::testing::Test {
 protected:
  // Writes `a`'s cached prefix, then its step's keys and values into layer 0 of `cache`; the step's attention
  // [tokens, heads, dim].
  std::vector<float> attend_two_sequences(KvCache& cache, const testing::TwoSequenceAttention& a,
                                          const AttentionParams& params) {
    const int heads = a.num_heads, kv_heads = a.num_kv_heads, dim = a.dim, tokens = a.num_tokens();
    {
      auto step = backend->begin_step(a.prefix);
      backend->store_kv(cache, 0, backend->from_host_f32(a.prefix_k, {a.cached[0], kv_heads, dim}),
                        backend->from_host_f32(a.prefix_v, {a.cached[0], kv_heads, dim}), *step);
    }
    auto step = backend->begin_step(a.step);
    backend->store_kv(cache, 0, backend->from_host_f32(a.k, {tokens, kv_heads, dim}),
                      backend->from_host_f32(a.v, {tokens, kv_heads, dim}), *step);
    return backend->to_host_f32(
        backend->attention(backend->from_host_f32(a.q, {tokens, heads, dim}), cache, 0, params, *step));
  }

  std::unique_ptr<Backend> backend = make_cpu_backend(2);
};

TEST_F(CpuOpsTest, LinearMatchesNaiveForOddShapesAndBf16Weights) {
  for (auto [rows, k, n] : {std::tuple{1, 7, 3}, {5, 33, 17}, {9, 64, 40}, {3, 130, 5}}) {
    const auto x = random_values(rows * k, 1);
    const auto w_f32 = random_values(n * k, 2);
    std::vector<uint16_t> w_bf16(w_f32.size());
    for (size_t i = 0; i < w_f32.size(); ++i) w_bf16[i] = f32_to_bf16(w_f32[i]);
    const auto bias = random_values(n, 3);
    const TensorInfo info = host_view(w_bf16, {n, k});
    const TensorInfo* parts[] = {&info};
    const Tensor weight = backend->load_weight(parts);
    const Tensor bias_t = backend->from_host_f32(bias, {n});
    const Tensor y = backend->linear(backend->from_host_f32(x, {rows, k}), weight, &bias_t);
    const auto out = backend->to_host_f32(y);
    for (int r = 0; r < rows; ++r) {
      for (int c = 0; c < n; ++c) {
        double expected = bias[c];
        for (int i = 0; i < k; ++i) expected += double(x[r * k + i]) * bf16_to_f32(w_bf16[c * k + i]);
        EXPECT_NEAR(out[r * n + c], expected, 1e-4 * (1 + std::abs(expected))) << rows << "x" << k << "x" << n;
      }
    }
  }
}

TEST_F(CpuOpsTest, LinearRowDoesNotDependOnBatch) {
  const int k = 100, n = 37, rows = 11;
  const auto x = random_values(rows * k, 4);
  const auto w = random_values(n * k, 5);
  const Tensor weight = backend->from_host_f32(w, {n, k});
  const auto batched = backend->to_host_f32(backend->linear(backend->from_host_f32(x, {rows, k}), weight, nullptr));
  for (int r = 0; r < rows; ++r) {
    std::vector<float> row(x.begin() + r * k, x.begin() + (r + 1) * k);
    const auto alone = backend->to_host_f32(backend->linear(backend->from_host_f32(row, {1, k}), weight, nullptr));
    for (int c = 0; c < n; ++c) ASSERT_EQ(alone[c], batched[r * n + c]) << "row " << r << " col " << c;
  }
}

TEST_F(CpuOpsTest, RmsNormAndFusedResidualAdd) {
  const int rows = 3, n = 50;
  const auto x = random_values(rows * n, 6);
  const auto delta = random_values(rows * n, 7);
  const auto w = random_values(n, 8);
  const Tensor weight = backend->from_host_f32(w, {n});
  Tensor residual = backend->from_host_f32(x, {rows, n});
  const auto normed = backend->to_host_f32(backend->add_rms_norm(residual, backend->from_host_f32(delta, {rows, n}), weight, 1e-5f));
  const auto summed = backend->to_host_f32(residual);
  for (int r = 0; r < rows; ++r) {
    double sum_sq = 0;
    for (int i = 0; i < n; ++i) {
      const double v = double(x[r * n + i]) + delta[r * n + i];
      EXPECT_NEAR(summed[r * n + i], v, 1e-6);
      sum_sq += v * v;
    }
    const double scale = 1.0 / std::sqrt(sum_sq / n + 1e-5);
    for (int i = 0; i < n; ++i) {
      EXPECT_NEAR(normed[r * n + i], (double(x[r * n + i]) + delta[r * n + i]) * scale * w[i], 1e-5);
    }
  }
}

TEST_F(CpuOpsTest, SiluMul) {
  const auto gu = random_values(2 * 6, 9);
  const auto out = backend->to_host_f32(backend->silu_mul(backend->from_host_f32(gu, {1, 12})));
  for (int i = 0; i < 6; ++i) {
    const double g = gu[i];
    EXPECT_NEAR(out[i], g / (1 + std::exp(-g)) * gu[6 + i], 1e-6);
  }
}

struct AttentionCase {
  int window;
  bool sinks;
};

// Two sequences in one step, one with a prefix already cached and shuffled block tables (blocks of 4 tokens, 7 in
// all).
testing::TwoSequenceAttention paged_two_sequences(int num_heads, int num_kv_heads, int dim) {
  return testing::two_sequence_attention(num_heads, num_kv_heads, dim, {6, 0}, {3, 5}, {{5, 1, 6}, {3, 0}});
}

class CpuAttentionTest : public CpuOpsTest, public ::testing::WithParamInterface<AttentionCase> {};

// paged_two_sequences checked against dense attention over the full sequences.
TEST_P(CpuAttentionTest, PagedGqaMatchesDenseAttention) {
  const int num_heads = 4, num_kv_heads = 2, dim = 8, block_size = 4;
  const auto [window, use_sinks] = GetParam();
  KvCache cache = backend->allocate_kv_cache({{num_kv_heads, dim, dim}}, 8, block_size);
  const auto sinks_values = random_values(num_heads, 99);
  const Tensor sinks = backend->from_host_f32(sinks_values, {num_heads});
  const auto a = paged_two_sequences(num_heads, num_kv_heads, dim);
  AttentionParams params;
  params.scale = 1.0f / std::sqrt(float(dim));
  params.sliding_window = window;
  params.sinks = use_sinks ? &sinks : nullptr;
  const auto out = attend_two_sequences(cache, a, params);
  size_t offset = 0;
  for (int s = 0; s < 2; ++s) {
    const auto expected = naive_attention(a.queries[s], a.full_k[s], a.full_v[s], a.fresh[s], num_heads, num_kv_heads,
                                          dim, a.cached[s], window, use_sinks ? &sinks_values : nullptr);
    for (size_t i = 0; i < expected.size(); ++i) ASSERT_NEAR(out[offset + i], expected[i], 1e-5) << "seq " << s;
    offset += expected.size();
  }
}

INSTANTIATE_TEST_SUITE_P(Variants, CpuAttentionTest,
                         ::testing::Values(AttentionCase{0, false}, AttentionCase{3, false}, AttentionCase{0, true},
                                           AttentionCase{4, true}));

// An FP8 KV cache (--kv-cache-dtype fp8_e4m3) holds e4m3 codes of key / key_scale and value / value_scale, a quarter
// of float32's bytes, and attention reads code times scale: paged_two_sequences against dense attention over keys
// and values rounded so, with scales that make the rounding differ from the unscaled one.
TEST_F(CpuOpsTest, Fp8KvCacheAttendsOverTheCodesTimesTheLayersScales) {
  const int num_heads = 4, num_kv_heads = 2, dim = 8, block_size = 4;
  KvLayerSpec layer{num_kv_heads, dim, dim};
  layer.key_scale = 0.01f;
  layer.value_scale = 3.0f;
  KvCache cache = backend->allocate_kv_cache({layer}, 8, block_size, KvCacheDtype::fp8_e4m3);
  EXPECT_EQ(cache.dtype, KvCacheDtype::fp8_e4m3);
  EXPECT_EQ(cache.keys[0].dtype, DType::F8_E4M3);
  EXPECT_EQ(cache.keys[0].bytes() * 4, backend->allocate_kv_cache({layer}, 8, block_size).keys[0].bytes());
  const auto a = paged_two_sequences(num_heads, num_kv_heads, dim);
  AttentionParams params;
  params.scale = 1.0f / std::sqrt(float(dim));
  const auto out = attend_two_sequences(cache, a, params);
  const auto rounded = [](std::vector<float> values, float scale) {
    for (float& x : values) x = f8_e4m3_to_f32(f32_to_f8_e4m3(x / scale)) * scale;
    return values;
  };
  size_t offset = 0;
  double largest_rounding = 0.0;
  for (int s = 0; s < 2; ++s) {
    const auto keys = rounded(a.full_k[s], layer.key_scale);
    const auto values = rounded(a.full_v[s], layer.value_scale);
    const auto expected = naive_attention(a.queries[s], keys, values, a.fresh[s], num_heads, num_kv_heads, dim,
                                          a.cached[s]);
    const auto unrounded = naive_attention(a.queries[s], a.full_k[s], a.full_v[s], a.fresh[s], num_heads,
                                           num_kv_heads, dim, a.cached[s]);
    for (size_t i = 0; i < expected.size(); ++i) {
      ASSERT_NEAR(out[offset + i], expected[i], 1e-5) << "seq " << s;
      largest_rounding = std::max(largest_rounding, std::abs(expected[i] - unrounded[i]));
    }
    offset += expected.size();
  }
  EXPECT_GT(largest_rounding, 1e-3);  // the codes are not float32 in disguise
}

// gpt-oss's layout: a sliding and a full layer form two KV cache groups, the full layer's first, the sliding layer
// storing its blocks in the full layer's tensors. Each reads its own group's table; the sliding table's block before
// the window is dropped (-1) and never read. Both match dense attention.
TEST_F(CpuOpsTest, TwoKvCacheGroupsShareStorageAndEachLayerReadsItsOwnTable) {
  const int num_heads = 4, num_kv_heads = 2, dim = 8, block_size = 4, window = 3;
  const int cached = 6, fresh = 3, total = 9;
  const KvLayerSpec full{num_kv_heads, dim, dim};
  const KvLayerSpec sliding{num_kv_heads, dim, dim, KvLayerKind::sliding_window, window};
  KvCache cache = backend->allocate_kv_cache({sliding, full}, 8, block_size);
  ASSERT_EQ(cache.groups.size(), 2u);
  EXPECT_EQ(cache.layer_group, (std::vector<int>{1, 0}));
  EXPECT_EQ(cache.keys[1].data, cache.keys[0].data);
  // The step's first query, at position 6, reads the sliding layer's tokens from 4 on: its block 0 is dropped.
  const std::vector<std::vector<int32_t>> prefix_tables = {{5, 1}, {2, 3}};
  const std::vector<std::vector<int32_t>> step_tables = {{5, 1, 6}, {-1, 3, 0}};
  std::vector<std::vector<float>> full_k, full_v;
  for (int layer = 0; layer < 2; ++layer) {
    full_k.push_back(random_values(total * num_kv_heads * dim, 40 + layer));
    full_v.push_back(random_values(total * num_kv_heads * dim, 50 + layer));
  }
  const auto store = [&](int layer, int begin, int count, const std::vector<std::vector<int32_t>>& tables) {
    ForwardBatch batch;
    batch.token_ids.assign(count, 0);
    batch.sequences.push_back({begin, count, tables});
    auto step = backend->begin_step(batch);
    const auto rows = [&](const std::vector<float>& all) {
      return std::vector<float>(all.begin() + begin * num_kv_heads * dim,
                                all.begin() + (begin + count) * num_kv_heads * dim);
    };
    backend->store_kv(cache, layer, backend->from_host_f32(rows(full_k[layer]), {count, num_kv_heads, dim}),
                      backend->from_host_f32(rows(full_v[layer]), {count, num_kv_heads, dim}), *step);
  };
  for (int layer = 0; layer < 2; ++layer) store(layer, 0, cached, prefix_tables);
  for (int layer = 0; layer < 2; ++layer) store(layer, cached, fresh, step_tables);

  ForwardBatch batch;
  batch.token_ids.assign(fresh, 0);
  batch.sequences.push_back({cached, fresh, step_tables});
  auto step = backend->begin_step(batch);
  const auto query = random_values(fresh * num_heads * dim, 60);
  for (int layer = 0; layer < 2; ++layer) {
    AttentionParams params;
    params.scale = 1.0f / std::sqrt(float(dim));
    params.sliding_window = layer == 0 ? window : 0;
    const auto out = backend->to_host_f32(
        backend->attention(backend->from_host_f32(query, {fresh, num_heads, dim}), cache, layer, params, *step));
    const auto expected = naive_attention(query, full_k[layer], full_v[layer], fresh, num_heads, num_kv_heads, dim,
                                          cached, params.sliding_window, nullptr);
    for (size_t i = 0; i < expected.size(); ++i) ASSERT_NEAR(out[i], expected[i], 1e-5) << "layer " << layer;
  }
}

TEST_F(CpuOpsTest, RopeRotatesHalvesByPosition) {
  const int heads = 2, dim = 8, rotary = 4;
  const std::vector<float> inv_freq = {1.0f, 0.25f};
  RopeTable table{backend->from_host_f32(inv_freq, {2}), rotary, 1.0f};
  ForwardBatch batch;
  batch.token_ids = {0, 0, 0};
  batch.sequences.push_back({5, 3, {{0}}});  // positions 5, 6, 7
  auto step = backend->begin_step(batch);
  const auto x = random_values(3 * heads * dim, 11);
  Tensor t = backend->from_host_f32(x, {3, heads, dim});
  backend->rope(t, table, *step);
  const auto out = backend->to_host_f32(t);
  for (int tok = 0; tok < 3; ++tok) {
    for (int h = 0; h < heads; ++h) {
      const float* in = &x[(tok * heads + h) * dim];
      const float* o = &out[(tok * heads + h) * dim];
      for (int i = 0; i < 2; ++i) {
        const double angle = (5 + tok) * inv_freq[i];
        EXPECT_NEAR(o[i], in[i] * std::cos(angle) - in[i + 2] * std::sin(angle), 1e-5);
        EXPECT_NEAR(o[i + 2], in[i + 2] * std::cos(angle) + in[i] * std::sin(angle), 1e-5);
      }
      for (int i = rotary; i < dim; ++i) EXPECT_EQ(o[i], in[i]);  // partial rotary leaves the rest alone
    }
  }
}

TEST_F(CpuOpsTest, EmbeddingRejectsOutOfVocabularyIds) {
  const std::vector<float> table(4 * 3, 1.0f);
  ForwardBatch batch;
  batch.token_ids = {7};
  batch.sequences.push_back({0, 1, {{0}}});
  auto step = backend->begin_step(batch);
  EXPECT_THROW(backend->embedding(backend->from_host_f32(table, {4, 3}), *step, {}), Error);
}

// A vocab-parallel shard holds rows [first_id, first_id + rows): other ranks' tokens read as zero rows, and ids are
// checked against the whole vocabulary.
TEST_F(CpuOpsTest, EmbeddingShardZeroesOtherRanksTokens) {
  const std::vector<float> table = {1, 2, 3, 4, 5, 6};  // ids 4 and 5 of a vocabulary of 7
  ForwardBatch batch;
  batch.token_ids = {5, 0, 4, 6};
  batch.sequences.push_back({0, 4, {{0}}});
  auto step = backend->begin_step(batch);
  const Tensor out = backend->embedding(backend->from_host_f32(table, {2, 3}), *step, {4, 7});
  EXPECT_EQ(backend->to_host_f32(out), (std::vector<float>{4, 5, 6, 0, 0, 0, 1, 2, 3, 0, 0, 0}));
  batch.token_ids = {7, 0, 0, 0};
  step = backend->begin_step(batch);
  EXPECT_THROW(backend->embedding(backend->from_host_f32(table, {2, 3}), *step, {4, 7}), Error);
}

// The dispatch and combine of data-parallel MoE layers: a row gather, and a scatter-add in order (a target twice
// adds twice).
TEST_F(CpuOpsTest, SelectRowsGathersAndAddRowsAddsIntoTargets) {
  using Floats = std::vector<float>;
  const Tensor x = backend->from_host_f32(Floats{1, 2, 3, 4, 5, 6}, {3, 2});
  EXPECT_EQ(backend->to_host_f32(backend->select_rows(x, std::vector<int32_t>{2, 0, 2})), (Floats{5, 6, 1, 2, 5, 6}));
  EXPECT_EQ(backend->select_rows(x, {}).shape, (std::vector<int64_t>{0, 2}));
  EXPECT_THROW(backend->select_rows(x, std::vector<int32_t>{3}), Error);
  EXPECT_THROW(backend->select_rows(backend->from_host_f32(Floats{1}, {}), std::vector<int32_t>{0}), Error);
  // Into rows of a buffer (a recorded step's input), the rows after them untouched; a buffer of another width,
  // dtype or row count refused.
  Tensor buffer = backend->from_host_f32(Floats(8, 0.0f), {4, 2});
  Tensor first_rows = buffer.rows(0, 2);
  backend->select_rows_into(x, std::vector<int32_t>{1, 2}, first_rows);
  EXPECT_EQ(backend->to_host_f32(buffer), (Floats{3, 4, 5, 6, 0, 0, 0, 0}));
  EXPECT_THROW(backend->select_rows_into(x, std::vector<int32_t>{1}, first_rows), Error);
  Tensor narrow = backend->from_host_f32(Floats(3, 0.0f), {3, 1});
  EXPECT_THROW(backend->select_rows_into(x, std::vector<int32_t>{0, 1, 2}, narrow), Error);
  Tensor ids = backend->from_host_i32(std::vector<int32_t>(4, 0), {2, 2});
  EXPECT_THROW(backend->select_rows_into(x, std::vector<int32_t>{0, 1}, ids), Error);
  EXPECT_THROW(backend->select_rows_into(x, std::vector<int32_t>{0, 3}, first_rows), Error);
  // A copy takes writes without changing x.
  Tensor copied = backend->copy(x);
  backend->add_in_place(copied, x);
  EXPECT_EQ(backend->to_host_f32(copied), (Floats{2, 4, 6, 8, 10, 12}));
  EXPECT_EQ(backend->to_host_f32(x), (Floats{1, 2, 3, 4, 5, 6}));
  Tensor out = backend->from_host_f32(Floats{10, 20, 30, 40}, {2, 2});
  backend->add_rows(out, x, std::vector<int32_t>{1, 0, 1});
  EXPECT_EQ(backend->to_host_f32(out), (Floats{13, 24, 36, 48}));  // row 1 gets x[0] + x[2]
  EXPECT_THROW(backend->add_rows(out, x, std::vector<int32_t>{0, 1}), Error) << "3 rows for 2 targets";
  Tensor none = backend->from_host_f32({}, {0, 2});
  backend->add_rows(none, backend->from_host_f32({}, {0, 2}), {});  // a rank with no tokens
  std::vector<int64_t> received_counts;
  EXPECT_THROW(backend->all_to_all_rows(x, std::vector<int64_t>{3}, received_counts), Error)
      << "a backend outside a group";
}

// A data-parallel rank without tokens sends empty hidden-state rows of this dtype (SparseMoe), which must be the
// dtype the ops give the other ranks' rows.
TEST_F(CpuOpsTest, ActivationDtypeIsTheDtypeOpsReturn) {
  const Tensor x = backend->from_host_f32(std::vector<float>{1, 2, 3, 4}, {2, 2});
  const Tensor weight = backend->from_host_f32(std::vector<float>{1, 1}, {2});
  EXPECT_EQ(backend->rms_norm(x, weight, 1e-6f).dtype, backend->activation_dtype());
  EXPECT_EQ(backend->linear(x, x, nullptr).dtype, backend->activation_dtype());
}

// all_to_all_rows on two CPU ranks: rank 0 sends one row to itself and two to rank 1, rank 1 sends nothing.
TEST(CpuGroupOpsTest, AllToAllRowsDeliversEachRanksShareIncludingNone) {
  auto group = make_cpu_backend_group(2, 2);
  std::vector<std::vector<float>> received(2);
  std::vector<std::vector<int64_t>> received_counts(2);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      auto backend = group->make(r);
      const Tensor rows = r == 0 ? backend->from_host_f32(std::vector<float>{1, 2, 3, 4, 5, 6}, {3, 2})
                                 : backend->from_host_f32({}, {0, 2});
      const std::vector<int64_t> counts = r == 0 ? std::vector<int64_t>{1, 2} : std::vector<int64_t>{0, 0};
      received[r] = backend->to_host_f32(backend->all_to_all_rows(rows, counts, received_counts[r]));
    });
  }
  for (auto& rank : ranks) rank.join();
  EXPECT_EQ(received[0], (std::vector<float>{1, 2}));
  EXPECT_EQ(received_counts[0], (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(received[1], (std::vector<float>{3, 4, 5, 6}));
  EXPECT_EQ(received_counts[1], (std::vector<int64_t>{2, 0}));
}

// Overlap scheduling: a token whose id is row r of the previous step's sampled ids (a tensor the host never read)
// gets that id when the step begins; the definition is with_deferred_tokens.
TEST_F(CpuOpsTest, DeferredTokensTakeThePreviousStepsSampledIds) {
  constexpr int64_t kVocab = 6;
  std::vector<float> table(kVocab * 2);
  for (int64_t v = 0; v < kVocab; ++v) table[v * 2] = table[v * 2 + 1] = static_cast<float>(v);
  // The previous step's ids {4, 1, 5}: argmax of one-hot logits.
  std::vector<float> logits(3 * kVocab, 0.0f);
  logits[0 * kVocab + 4] = logits[1 * kVocab + 1] = logits[2 * kVocab + 5] = 1.0f;
  ForwardBatch batch;
  batch.token_ids = {3, 0, 0};
  batch.sequences = {{0, 2, {{0}}}, {0, 1, {{1}}}};
  batch.deferred_tokens = {{1, 2}, {2, 0}};
  batch.previous_sampled_ids = backend->argmax(backend->from_host_f32(logits, {3, kVocab}));
  EXPECT_EQ(with_deferred_tokens(batch, std::vector<int32_t>{4, 1, 5}).token_ids, (std::vector<int32_t>{3, 5, 4}));
  auto step = backend->begin_step(batch);
  EXPECT_EQ(step->batch().token_ids, (std::vector<int32_t>{3, 5, 4}));
  EXPECT_EQ(backend->to_host_f32(backend->embedding(backend->from_host_f32(table, {kVocab, 2}), *step, {})),
            (std::vector<float>{3, 3, 5, 5, 4, 4}));
  batch.deferred_tokens = {{1, 3}};  // past the previous step's rows
  EXPECT_THROW(backend->begin_step(batch), Error);
  batch.deferred_tokens = {{3, 0}};  // past the batch's tokens
  EXPECT_THROW(backend->begin_step(batch), Error);
}

}  // namespace
}  // namespace tern
