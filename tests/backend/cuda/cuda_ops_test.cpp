// Every CUDA op against the CPU reference on random inputs of many shapes (llama.cpp's test-backend-ops idea).
// Inputs are bf16 values on both sides; CUDA outputs are bf16, hence the tolerances of a few bf16 ulps.
#include <numeric>

#include "cuda_test_util.h"

namespace tern {
namespace {

using testing::random_bf16_values;
using testing::relative_error;

class CudaOpsTest : public testing::CudaVsCpuTest {
 protected:
  void expect_close(const Tensor& gpu_out, const Tensor& cpu_out, double tolerance, const std::string& what) {
    ASSERT_EQ(gpu_out.shape, cpu_out.shape) << what;
    const auto a = gpu->to_host_f32(gpu_out);
    const auto b = cpu->to_host_f32(cpu_out);
    EXPECT_LE(relative_error(a, b), tolerance) << what;
  }

  ForwardBatch one_sequence_batch(int num_tokens, int num_cached, int vocab, uint32_t seed) {
    std::mt19937 rng(seed);
    ForwardBatch batch;
    for (int i = 0; i < num_tokens; ++i) batch.token_ids.push_back(static_cast<int32_t>(rng() % vocab));
    SequenceChunk seq{num_cached, num_tokens, {{}}};
    for (int b = 0; b < (num_cached + num_tokens + 15) / 16; ++b) seq.block_tables[0].push_back(b);
    batch.sequences.push_back(seq);
    return batch;
  }
};

TEST_F(CudaOpsTest, Embedding) {
  for (auto [vocab, hidden, tokens] : {std::tuple{50, 16, 7}, {512, 64, 40}, {1000, 136, 3}, {97, 36, 1}}) {
    const auto table = weight(random_bf16_values(vocab * hidden, 1), {vocab, hidden});
    const ForwardBatch batch = one_sequence_batch(tokens, 0, vocab, 2);
    const auto cpu_step = cpu->begin_step(batch);
    const auto gpu_step = gpu->begin_step(batch);
    expect_close(gpu->embedding(table.gpu, *gpu_step, {}), cpu->embedding(table.cpu, *cpu_step, {}), 0,
                 fmt::format("embedding {}x{}", vocab, hidden));
    // The same table as the shard of ids [vocab / 2, vocab / 2 + vocab) of a vocabulary twice as large.
    const VocabShard shard{vocab / 2, 2 * vocab};
    const ForwardBatch wide = one_sequence_batch(tokens, 0, 2 * vocab, 3);
    const auto cpu_wide = cpu->begin_step(wide);
    const auto gpu_wide = gpu->begin_step(wide);
    expect_close(gpu->embedding(table.gpu, *gpu_wide, shard), cpu->embedding(table.cpu, *cpu_wide, shard), 0,
                 fmt::format("embedding shard {}x{}", vocab, hidden));
  }
}

TEST_F(CudaOpsTest, EmbeddingRejectsTokenOutsideVocabulary) {
  const auto table = weight(random_bf16_values(10 * 8, 1), {10, 8});
  ForwardBatch batch;
  batch.token_ids = {3, 10};
  batch.sequences.push_back({0, 2, {{0}}});
  const auto step = gpu->begin_step(batch);
  EXPECT_THROW(gpu->embedding(table.gpu, *step, {}), Error);
}

TEST_F(CudaOpsTest, RmsNormAndAddRmsNorm) {
  // Row widths held in 1, 2, 4 and 8 registers' vectors per thread (16384: DeepSeek-V4's 4 flattened streams),
  // wider ones (20480) and unaligned ones (100).
  for (auto [rows, width] : {std::pair{1, 64}, {7, 16}, {33, 4096}, {5, 100}, {130, 256}, {3, 1000}, {1, 5120},
                             {2, 7168}, {2, 9216}, {1, 16384}, {2, 20480}}) {
    const auto x = input(random_bf16_values(rows * width, 3), {rows, width});
    const auto w = weight(random_bf16_values(width, 4, 0.5f), {width});
    const std::string what = fmt::format("{}x{}", rows, width);
    expect_close(gpu->rms_norm(x.gpu, w.gpu, 1e-5f), cpu->rms_norm(x.cpu, w.cpu, 1e-5f), 1e-2, "rms_norm " + what);
    auto residual = input(random_bf16_values(rows * width, 5), {rows, width});
    const Tensor gpu_out = gpu->add_rms_norm(residual.gpu, x.gpu, w.gpu, 1e-6f);
    const Tensor cpu_out = cpu->add_rms_norm(residual.cpu, x.cpu, w.cpu, 1e-6f);
    expect_close(residual.gpu, residual.cpu, 1e-2, "add_rms_norm residual " + what);
    expect_close(gpu_out, cpu_out, 1e-2, "add_rms_norm " + what);
  }
}

TEST_F(CudaOpsTest, RmsNormOverHeads) {
  // q/k norms normalize each head of [T, heads, head_dim] with a [head_dim] weight.
  const auto x = input(random_bf16_values(5 * 4 * 16, 6), {5, 4, 16});
  const auto w = weight(random_bf16_values(16, 7), {16});
  expect_close(gpu->rms_norm(x.gpu, w.gpu, 1e-6f), cpu->rms_norm(x.cpu, w.cpu, 1e-6f), 1e-2, "per-head rms_norm");
}

TEST_F(CudaOpsTest, LinearWithAndWithoutBias) {
  // One row into few outputs in float32 (16384 x 24, 4096 x 64, 2048 x 128) takes the skinny GEMV.
  for (auto [rows, k, n] : {std::tuple{1, 64, 512}, {7, 64, 192}, {40, 256, 1024}, {3, 128, 40}, {300, 512, 768},
                            {1, 4096, 4096}, {17, 96, 8}, {2, 1024, 300}, {4, 2048, 264}, {128, 4096, 640},
                            {64, 14336, 384}, {129, 256, 384}, {65, 1536, 136}, {1, 16384, 24}, {1, 4096, 64},
                            {1, 2048, 128}}) {
    const auto x = input(random_bf16_values(rows * k, 8), {rows, k});
    const auto w = weight(random_bf16_values(n * k, 9, 0.1f), {n, k});
    const auto b = weight(random_bf16_values(n, 10), {n});
    const std::string what = fmt::format("{}x{}x{}", rows, k, n);
    expect_close(gpu->linear(x.gpu, w.gpu, nullptr), cpu->linear(x.cpu, w.cpu, nullptr), 1e-2, "linear " + what);
    expect_close(gpu->linear(x.gpu, w.gpu, &b.gpu), cpu->linear(x.cpu, w.cpu, &b.cpu), 1e-2, "linear+bias " + what);
    const Tensor wide = gpu->linear_f32(x.gpu, w.gpu, &b.gpu);
    EXPECT_EQ(wide.dtype, DType::F32);
    expect_close(wide, cpu->linear(x.cpu, w.cpu, &b.cpu), 1e-3, "linear_f32+bias " + what);
    expect_close(gpu->linear_f32(x.gpu, w.gpu, nullptr), cpu->linear(x.cpu, w.cpu, nullptr), 1e-3,
                 "linear_f32 " + what);
  }
}

// At batch 1 norm_linear is one GEMV that adds the residual and normalizes; it must agree with the same ops run one
// by one on the GPU (the residual bit for bit) and with the CPU. Widths past one chunk per thread (5120), outputs
// that fill no whole block, biases; 3 rows take the ops one by one.
TEST_F(CudaOpsTest, NormLinearMatchesTheOpsOneByOne) {
  struct Case {
    int rows, k, n;
    bool addend, bias;
  };
  for (const Case& c : {Case{1, 4096, 6144, true, false}, Case{1, 1024, 1000, false, true},
                        Case{1, 5120, 264, true, true}, Case{1, 512, 36, false, false}, Case{3, 256, 96, true, false}}) {
    const std::string what =
        fmt::format("{}x{}x{}{}{}", c.rows, c.k, c.n, c.addend ? " addend" : "", c.bias ? " bias" : "");
    auto residual = input(random_bf16_values(c.rows * c.k, 20), {c.rows, c.k});
    auto residual_by_ops = input(random_bf16_values(c.rows * c.k, 20), {c.rows, c.k});
    const auto addend = input(random_bf16_values(c.rows * c.k, 21), {c.rows, c.k});
    const auto norm = weight(random_bf16_values(c.k, 22, 0.5f), {c.k});
    const auto w = weight(random_bf16_values(c.n * c.k, 23, 0.1f), {c.n, c.k});
    const auto b = weight(random_bf16_values(c.n, 24), {c.n});
    PreNorm gpu_input{residual.gpu, c.addend ? &addend.gpu : nullptr, norm.gpu, 1e-5f};
    PreNorm cpu_input{residual.cpu, c.addend ? &addend.cpu : nullptr, norm.cpu, 1e-5f};
    const Tensor gpu_out = gpu->norm_linear(gpu_input, w.gpu, c.bias ? &b.gpu : nullptr);
    const Tensor cpu_out = cpu->norm_linear(cpu_input, w.cpu, c.bias ? &b.cpu : nullptr);
    const Tensor x = c.addend ? gpu->add_rms_norm(residual_by_ops.gpu, addend.gpu, norm.gpu, 1e-5f)
                              : gpu->rms_norm(residual_by_ops.gpu, norm.gpu, 1e-5f);
    const Tensor by_ops = gpu->linear(x, w.gpu, c.bias ? &b.gpu : nullptr);
    ASSERT_EQ(gpu_out.shape, (std::vector<int64_t>{c.rows, c.n})) << what;
    EXPECT_EQ(gpu->to_host_f32(residual.gpu), gpu->to_host_f32(residual_by_ops.gpu)) << what;
    EXPECT_LE(relative_error(gpu->to_host_f32(gpu_out), gpu->to_host_f32(by_ops)), 1e-2) << what;
    expect_close(residual.gpu, residual.cpu, 1e-2, "residual " + what);
    expect_close(gpu_out, cpu_out, 2e-2, what);
  }
}

// norm_linear_silu_mul: at batch 1 the GEMV's epilogue pairs gate row i with up row i; it must agree with the ops
// one by one on the GPU and with the CPU. Widths of one and of several blocks of 8 pairs, one that is no multiple
// of 8 and 2 rows (both the ops one by one).
TEST_F(CudaOpsTest, NormLinearSiluMulMatchesTheOpsOneByOne) {
  for (auto [rows, k, width] : {std::tuple{1, 1024, 1024}, {1, 512, 24}, {1, 256, 10}, {2, 256, 32}}) {
    const std::string what = fmt::format("{}x{}x2*{}", rows, k, width);
    auto residual = input(random_bf16_values(rows * k, 30), {rows, k});
    auto residual_by_ops = input(random_bf16_values(rows * k, 30), {rows, k});
    const auto addend = input(random_bf16_values(rows * k, 31), {rows, k});
    const auto norm = weight(random_bf16_values(k, 32, 0.5f), {k});
    const auto w = weight(random_bf16_values(2 * width * k, 33, 0.1f), {2 * width, k});
    PreNorm gpu_input{residual.gpu, &addend.gpu, norm.gpu, 1e-5f};
    PreNorm by_ops_input{residual_by_ops.gpu, &addend.gpu, norm.gpu, 1e-5f};
    PreNorm cpu_input{residual.cpu, &addend.cpu, norm.cpu, 1e-5f};
    const Tensor gpu_out = gpu->norm_linear_silu_mul(gpu_input, w.gpu);
    const Tensor by_ops = gpu->Backend::norm_linear_silu_mul(by_ops_input, w.gpu);
    ASSERT_EQ(gpu_out.shape, (std::vector<int64_t>{rows, width})) << what;
    EXPECT_EQ(gpu->to_host_f32(gpu_input.residual), gpu->to_host_f32(by_ops_input.residual)) << what;
    EXPECT_LE(relative_error(gpu->to_host_f32(gpu_out), gpu->to_host_f32(by_ops)), 1e-2) << what;
    expect_close(gpu_out, cpu->norm_linear_silu_mul(cpu_input, w.cpu), 2e-2, what);
  }
}

// norm_linear_rope_store_kv: at batch 1 the GEMV's epilogue rotates q and k (a head's dims d and d + D/2 in one
// block) and writes k and v to the token's slot. Against the ops one by one on the GPU (the queries, the whole key
// and value caches) and against the CPU (the queries, the slot's keys and values). The 8B shape, a bias and RoPE
// scaling, a token another context-parallel rank caches (nothing written), and rotary dims short of the head (the
// ops one by one).
TEST_F(CudaOpsTest, NormLinearRopeStoreKvMatchesTheOpsOneByOne) {
  struct Case {
    int heads, kv_heads, head_dim, k, cached, rotary_dim;
    bool bias;
    float scaling;
    KvContextShard shard;
  };
  for (const Case& c : {Case{32, 8, 128, 4096, 37, 128, false, 1.0f, {}}, Case{4, 2, 64, 256, 0, 64, true, 1.2f, {}},
                        Case{2, 1, 16, 64, 200, 16, false, 1.0f, {}}, Case{4, 2, 64, 256, 36, 64, false, 1.0f, {1, 2}},
                        Case{4, 2, 64, 256, 5, 32, false, 1.0f, {}}}) {
    const std::string what = fmt::format("{}/{} heads of {}, K {}, at {}, rotary {}, shard {} of {}", c.heads, c.kv_heads,
                                         c.head_dim, c.k, c.cached, c.rotary_dim, c.shard.rank, c.shard.size);
    const int n = (c.heads + 2 * c.kv_heads) * c.head_dim;
    auto residual = input(random_bf16_values(c.k, 40), {1, c.k});
    auto residual_by_ops = input(random_bf16_values(c.k, 40), {1, c.k});
    const auto addend = input(random_bf16_values(c.k, 41), {1, c.k});
    const auto norm = weight(random_bf16_values(c.k, 42, 0.5f), {c.k});
    const auto w = weight(random_bf16_values(static_cast<size_t>(n) * c.k, 43, 0.1f), {n, c.k});
    const auto b = weight(random_bf16_values(n, 44), {n});
    const std::vector<float> inv_freq = testing::rope_inv_freq(c.rotary_dim);
    const RopeTable cpu_table{cpu->from_host_f32(inv_freq, {c.rotary_dim / 2}), c.rotary_dim, c.scaling};
    const RopeTable gpu_table{gpu->from_host_f32(inv_freq, {c.rotary_dim / 2}), c.rotary_dim, c.scaling};
    const std::vector<KvLayerSpec> layers = {{c.kv_heads, c.head_dim, c.head_dim}};
    const ForwardBatch batch = one_sequence_batch(1, c.cached, 100, 45);
    const int blocks = (c.cached + 1 + 15) / 16;
    KvCache gpu_cache = gpu->allocate_kv_cache(layers, blocks, 16);
    KvCache by_ops_cache = gpu->allocate_kv_cache(layers, blocks, 16);
    KvCache cpu_cache = cpu->allocate_kv_cache(layers, blocks, 16);
    gpu_cache.context_shard = by_ops_cache.context_shard = cpu_cache.context_shard = c.shard;
    const auto gpu_step = gpu->begin_step(batch);
    const auto cpu_step = cpu->begin_step(batch);
    const QkvHeads heads{c.heads, c.kv_heads, c.head_dim, {}};
    PreNorm gpu_input{residual.gpu, &addend.gpu, norm.gpu, 1e-5f};
    PreNorm by_ops_input{residual_by_ops.gpu, &addend.gpu, norm.gpu, 1e-5f};
    PreNorm cpu_input{residual.cpu, &addend.cpu, norm.cpu, 1e-5f};
    const Tensor* gpu_bias = c.bias ? &b.gpu : nullptr;
    const Tensor q =
        gpu->norm_linear_rope_store_kv(gpu_input, w.gpu, gpu_bias, heads, gpu_table, gpu_cache, 0, *gpu_step);
    const Tensor q_by_ops = gpu->Backend::norm_linear_rope_store_kv(by_ops_input, w.gpu, gpu_bias, heads, gpu_table,
                                                                    by_ops_cache, 0, *gpu_step);
    const Tensor q_cpu = cpu->norm_linear_rope_store_kv(cpu_input, w.cpu, c.bias ? &b.cpu : nullptr, heads, cpu_table,
                                                        cpu_cache, 0, *cpu_step);
    ASSERT_EQ(q.shape, (std::vector<int64_t>{1, c.heads, c.head_dim})) << what;
    EXPECT_EQ(gpu->to_host_f32(gpu_input.residual), gpu->to_host_f32(by_ops_input.residual)) << what;
    EXPECT_LE(relative_error(gpu->to_host_f32(q), gpu->to_host_f32(q_by_ops)), 1e-2) << what;
    expect_close(q, q_cpu, 2e-2, what + ", queries");
    // The token's slot (identity block tables); the GPU caches start as zeros, the CPU's uninitialized.
    const bool held = c.shard.holds(c.cached);
    const size_t row = static_cast<size_t>(c.kv_heads) * c.head_dim;
    const size_t slot_begin = c.cached / c.shard.size * row;
    for (const auto& [part, gpu_part, by_ops_part, cpu_part] :
         {std::tuple{"keys", &gpu_cache.keys[0], &by_ops_cache.keys[0], &cpu_cache.keys[0]},
          {"values", &gpu_cache.values[0], &by_ops_cache.values[0], &cpu_cache.values[0]}}) {
      const auto cached = gpu->to_host_f32(*gpu_part);
      EXPECT_LE(relative_error(cached, gpu->to_host_f32(*by_ops_part)), 1e-2) << what << ", " << part;
      const std::vector<float> slot_row(cached.begin() + slot_begin, cached.begin() + slot_begin + row);
      std::vector<float> others(cached.begin(), cached.begin() + slot_begin);
      others.insert(others.end(), cached.begin() + slot_begin + row, cached.end());
      EXPECT_TRUE(std::all_of(others.begin(), others.end(), [](float x) { return x == 0.0f; })) << what << ", " << part;
      const bool written = std::any_of(slot_row.begin(), slot_row.end(), [](float x) { return x != 0.0f; });
      EXPECT_EQ(written, held) << what << ", " << part;
      if (!held) continue;
      const auto cpu_cached = cpu->to_host_f32(*cpu_part);
      const std::vector<float> cpu_row(cpu_cached.begin() + slot_begin, cpu_cached.begin() + slot_begin + row);
      EXPECT_LE(relative_error(slot_row, cpu_row), 2e-2) << what << ", " << part;
    }
  }
}

// rope_store_qkv reads q, k and v where they lie in the projection's rows (no column copies): the same rotated
// queries and cache slots, bit for bit, as rope_store_kv of the copied columns, and close to the CPU's. Rotate-half
// (the vectorized kernel), partial rotary (its unrotated query dims copied) and interleaved pairs (the scalar one).
TEST_F(CudaOpsTest, RopeStoreQkvReadsTheProjectionRows) {
  struct Case {
    int rows, heads, kv_heads, head_dim, rotary_dim, cached;
    bool interleaved;
  };
  for (const Case c : {Case{1, 4, 2, 64, 64, 5, false}, Case{7, 4, 2, 64, 64, 20, false},
                       Case{64, 8, 2, 128, 128, 0, false}, Case{9, 2, 1, 128, 64, 3, false},
                       Case{6, 4, 2, 32, 32, 11, true}}) {
    const std::string what = fmt::format("{} rows, {}/{} heads of {}, rotary {}{}", c.rows, c.heads, c.kv_heads,
                                         c.head_dim, c.rotary_dim, c.interleaved ? " interleaved" : "");
    const int n = (c.heads + 2 * c.kv_heads) * c.head_dim;
    const auto qkv = input(random_bf16_values(static_cast<size_t>(c.rows) * n, 50), {c.rows, n});
    const std::vector<float> inv_freq = testing::rope_inv_freq(c.rotary_dim);
    RopeTable cpu_table{cpu->from_host_f32(inv_freq, {c.rotary_dim / 2}), c.rotary_dim, 1.0f};
    RopeTable gpu_table{gpu->from_host_f32(inv_freq, {c.rotary_dim / 2}), c.rotary_dim, 1.0f};
    cpu_table.interleaved = gpu_table.interleaved = c.interleaved;
    const std::vector<KvLayerSpec> layers = {{c.kv_heads, c.head_dim, c.head_dim}};
    const ForwardBatch batch = one_sequence_batch(c.rows, c.cached, 100, 51);
    const int blocks = (c.cached + c.rows + 15) / 16;
    KvCache gpu_cache = gpu->allocate_kv_cache(layers, blocks, 16);
    KvCache by_copies_cache = gpu->allocate_kv_cache(layers, blocks, 16);
    KvCache cpu_cache = cpu->allocate_kv_cache(layers, blocks, 16);
    const auto gpu_step = gpu->begin_step(batch);
    const auto cpu_step = cpu->begin_step(batch);
    const QkvHeads heads{c.heads, c.kv_heads, c.head_dim, {}};
    const Tensor q = gpu->rope_store_qkv(qkv.gpu, heads, gpu_table, gpu_cache, 0, *gpu_step);
    const Tensor q_by_copies = gpu->Backend::rope_store_qkv(qkv.gpu, heads, gpu_table, by_copies_cache, 0, *gpu_step);
    const Tensor q_cpu = cpu->rope_store_qkv(qkv.cpu, heads, cpu_table, cpu_cache, 0, *cpu_step);
    ASSERT_EQ(q.shape, (std::vector<int64_t>{c.rows, c.heads, c.head_dim})) << what;
    EXPECT_EQ(gpu->to_host_f32(q), gpu->to_host_f32(q_by_copies)) << what;
    expect_close(q, q_cpu, 2e-2, what + ", queries");
    // The step's slots (identity block tables) follow the cached tokens.
    const size_t row = static_cast<size_t>(c.kv_heads) * c.head_dim;
    for (const auto& [part, gpu_part, by_copies_part, cpu_part] :
         {std::tuple{"keys", &gpu_cache.keys[0], &by_copies_cache.keys[0], &cpu_cache.keys[0]},
          {"values", &gpu_cache.values[0], &by_copies_cache.values[0], &cpu_cache.values[0]}}) {
      const auto cached = gpu->to_host_f32(*gpu_part);
      EXPECT_EQ(cached, gpu->to_host_f32(*by_copies_part)) << what << ", " << part;
      const auto cpu_cached = cpu->to_host_f32(*cpu_part);
      const auto first = static_cast<std::ptrdiff_t>(c.cached * row);
      const auto last = first + static_cast<std::ptrdiff_t>(c.rows * row);
      EXPECT_LE(relative_error(std::vector<float>(cached.begin() + first, cached.begin() + last),
                               std::vector<float>(cpu_cached.begin() + first, cpu_cached.begin() + last)),
                2e-2)
          << what << ", " << part;
    }
  }
}

// rope_store_qkv with Qwen3's per-head norms of q and k: one kernel normalizes each head, rotates it and writes the
// cache; against the separate ops (split, rms_norm of q and k, rope_store_kv) on the GPU and against the CPU.
TEST_F(CudaOpsTest, RopeStoreQkvNormalizesHeads) {
  struct Case {
    int rows, heads, kv_heads, head_dim, rotary_dim, cached;
    bool interleaved;
  };
  for (const Case c : {Case{1, 4, 2, 128, 128, 5, false}, Case{7, 32, 4, 128, 128, 20, false},
                       Case{9, 2, 1, 64, 32, 3, false}, Case{6, 4, 2, 32, 32, 11, true},
                       Case{3, 2, 2, 512, 64, 0, false}}) {
    const std::string what = fmt::format("{} rows, {}/{} heads of {}, rotary {}{}", c.rows, c.heads, c.kv_heads,
                                         c.head_dim, c.rotary_dim, c.interleaved ? " interleaved" : "");
    const int n = (c.heads + 2 * c.kv_heads) * c.head_dim;
    const auto qkv = input(random_bf16_values(static_cast<size_t>(c.rows) * n, 60), {c.rows, n});
    const auto q_norm = weight(random_bf16_values(c.head_dim, 61, 0.5f), {c.head_dim});
    const auto k_norm = weight(random_bf16_values(c.head_dim, 62, 0.5f), {c.head_dim});
    const std::vector<float> inv_freq = testing::rope_inv_freq(c.rotary_dim);
    RopeTable cpu_table{cpu->from_host_f32(inv_freq, {c.rotary_dim / 2}), c.rotary_dim, 1.0f};
    RopeTable gpu_table{gpu->from_host_f32(inv_freq, {c.rotary_dim / 2}), c.rotary_dim, 1.0f};
    cpu_table.interleaved = gpu_table.interleaved = c.interleaved;
    const std::vector<KvLayerSpec> layers = {{c.kv_heads, c.head_dim, c.head_dim}};
    const ForwardBatch batch = one_sequence_batch(c.rows, c.cached, 100, 63);
    const int blocks = (c.cached + c.rows + 15) / 16;
    KvCache gpu_cache = gpu->allocate_kv_cache(layers, blocks, 16);
    KvCache by_ops_cache = gpu->allocate_kv_cache(layers, blocks, 16);
    KvCache cpu_cache = cpu->allocate_kv_cache(layers, blocks, 16);
    const auto gpu_step = gpu->begin_step(batch);
    const auto cpu_step = cpu->begin_step(batch);
    const QkvHeads gpu_heads{c.heads, c.kv_heads, c.head_dim, {&q_norm.gpu, &k_norm.gpu, 1e-6f}};
    const QkvHeads cpu_heads{c.heads, c.kv_heads, c.head_dim, {&q_norm.cpu, &k_norm.cpu, 1e-6f}};
    const Tensor q = gpu->rope_store_qkv(qkv.gpu, gpu_heads, gpu_table, gpu_cache, 0, *gpu_step);
    const Tensor q_by_ops = gpu->Backend::rope_store_qkv(qkv.gpu, gpu_heads, gpu_table, by_ops_cache, 0, *gpu_step);
    const Tensor q_cpu = cpu->rope_store_qkv(qkv.cpu, cpu_heads, cpu_table, cpu_cache, 0, *cpu_step);
    ASSERT_EQ(q.shape, (std::vector<int64_t>{c.rows, c.heads, c.head_dim})) << what;
    // The head's sum of squares adds in another order than rms_norm's: a norm may differ in its last bit.
    EXPECT_LE(relative_error(gpu->to_host_f32(q), gpu->to_host_f32(q_by_ops)), 1e-2)
        << what << ", queries against the separate ops";
    expect_close(q, q_cpu, 2e-2, what + ", queries");
    const size_t row = static_cast<size_t>(c.kv_heads) * c.head_dim;
    const auto first = static_cast<std::ptrdiff_t>(c.cached * row);
    const auto last = first + static_cast<std::ptrdiff_t>(c.rows * row);
    const auto written = [&](const std::vector<float>& all) {
      return std::vector<float>(all.begin() + first, all.begin() + last);
    };
    for (const auto& [part, gpu_part, by_ops_part, cpu_part] :
         {std::tuple{"keys", &gpu_cache.keys[0], &by_ops_cache.keys[0], &cpu_cache.keys[0]},
          {"values", &gpu_cache.values[0], &by_ops_cache.values[0], &cpu_cache.values[0]}}) {
      const auto cached = written(gpu->to_host_f32(*gpu_part));
      EXPECT_LE(relative_error(cached, written(gpu->to_host_f32(*by_ops_part))), 1e-2) << what << ", " << part;
      EXPECT_LE(relative_error(cached, written(cpu->to_host_f32(*cpu_part))), 2e-2) << what << ", " << part;
    }
  }
  const auto qkv = input(random_bf16_values(64 * 2, 64), {2, 64});
  const auto short_norm = weight(random_bf16_values(8, 65), {8});
  RopeTable table{gpu->from_host_f32(testing::rope_inv_freq(16), {8}), 16, 1.0f};
  KvCache cache = gpu->allocate_kv_cache({{1, 16, 16}}, 1, 16);
  const ForwardBatch batch = one_sequence_batch(2, 0, 100, 66);  // the step refers to it
  const auto step = gpu->begin_step(batch);
  EXPECT_THROW(
      gpu->rope_store_qkv(qkv.gpu, {2, 1, 16, {&short_norm.gpu, &short_norm.gpu, 1e-6f}}, table, cache, 0, *step),
      Error);
}

// DeepSeek-V4's shape: queries and the shared K=V head from separate projections, each head normalized (the queries
// by a weight of ones), interleaved RoPE on the last 64 of 512 dims, a keys-only cache.
TEST_F(CudaOpsTest, RopeStoreKvNormalizesSeparateHeads) {
  constexpr int kHeads = 8, kHeadDim = 512, kRotary = 64;
  for (const int rows : {1, 5}) {
    const std::string what = fmt::format("{} rows", rows);
    const std::vector<float> query_values = random_bf16_values(static_cast<size_t>(rows) * kHeads * kHeadDim, 70);
    const std::vector<float> key_values = random_bf16_values(static_cast<size_t>(rows) * kHeadDim, 71);
    // Each op rewrites its query in place: one copy of the inputs for each.
    auto fused = std::pair{input(query_values, {rows, kHeads, kHeadDim}), input(key_values, {rows, 1, kHeadDim})};
    auto by_ops = std::pair{input(query_values, {rows, kHeads, kHeadDim}), input(key_values, {rows, 1, kHeadDim})};
    const auto ones = weight(std::vector<float>(kHeadDim, 1.0f), {kHeadDim});
    const auto key_norm = weight(random_bf16_values(kHeadDim, 72, 0.5f), {kHeadDim});
    const std::vector<float> inv_freq = testing::rope_inv_freq(kRotary);
    RopeTable cpu_table{cpu->from_host_f32(inv_freq, {kRotary / 2}), kRotary, 1.0f};
    RopeTable gpu_table{gpu->from_host_f32(inv_freq, {kRotary / 2}), kRotary, 1.0f};
    cpu_table.interleaved = gpu_table.interleaved = true;
    cpu_table.rotate_last_dims = gpu_table.rotate_last_dims = true;
    const std::vector<KvLayerSpec> layers = {{1, kHeadDim, 0}};
    const ForwardBatch batch = one_sequence_batch(rows, 7, 100, 73);
    KvCache gpu_cache = gpu->allocate_kv_cache(layers, 1, 16);
    KvCache by_ops_cache = gpu->allocate_kv_cache(layers, 1, 16);
    KvCache cpu_cache = cpu->allocate_kv_cache(layers, 1, 16);
    const auto gpu_step = gpu->begin_step(batch);
    const auto cpu_step = cpu->begin_step(batch);
    Tensor& fused_query = fused.first.gpu;
    Tensor& fused_key = fused.second.gpu;
    Tensor& by_ops_query = by_ops.first.gpu;
    Tensor& by_ops_key = by_ops.second.gpu;
    Tensor& cpu_query = fused.first.cpu;
    Tensor& cpu_key = fused.second.cpu;
    gpu->rope_store_kv(fused_query, fused_key, fused_key, {&ones.gpu, &key_norm.gpu, 1e-6f}, gpu_table, gpu_cache, 0,
                       *gpu_step);
    gpu->Backend::rope_store_kv(by_ops_query, by_ops_key, by_ops_key, {&ones.gpu, &key_norm.gpu, 1e-6f}, gpu_table,
                                by_ops_cache, 0, *gpu_step);
    cpu->rope_store_kv(cpu_query, cpu_key, cpu_key, {&ones.cpu, &key_norm.cpu, 1e-6f}, cpu_table, cpu_cache, 0,
                       *cpu_step);
    ASSERT_EQ(fused_query.shape, (std::vector<int64_t>{rows, kHeads, kHeadDim})) << what;
    EXPECT_LE(relative_error(gpu->to_host_f32(fused_query), gpu->to_host_f32(by_ops_query)), 1e-2) << what;
    EXPECT_LE(relative_error(gpu->to_host_f32(fused_query), cpu->to_host_f32(cpu_query)), 2e-2) << what;
    const auto first = static_cast<std::ptrdiff_t>(7 * kHeadDim);
    const auto written = [&](const std::vector<float>& all) {
      return std::vector<float>(all.begin() + first, all.begin() + first + rows * kHeadDim);
    };
    const auto cached = written(gpu->to_host_f32(gpu_cache.keys[0]));
    EXPECT_LE(relative_error(cached, written(gpu->to_host_f32(by_ops_cache.keys[0]))), 1e-2) << what << ", keys";
    EXPECT_LE(relative_error(cached, written(cpu->to_host_f32(cpu_cache.keys[0]))), 2e-2) << what << ", keys";
  }
}

TEST_F(CudaOpsTest, LinearRejectsMismatchedFeatures) {
  const auto x = input(random_bf16_values(4 * 8, 1), {4, 8});
  const auto w = weight(random_bf16_values(3 * 9, 2), {3, 9});
  EXPECT_THROW(gpu->linear(x.gpu, w.gpu, nullptr), Error);
}

TEST_F(CudaOpsTest, AddInPlaceSliceColumnsSiluMul) {
  for (auto [rows, width] : {std::pair{1, 8}, {9, 30}, {64, 1024}, {3, 7}}) {
    auto x = input(random_bf16_values(rows * width, 11), {rows, width});
    const auto y = input(random_bf16_values(rows * width, 12), {rows, width});
    gpu->add_in_place(x.gpu, y.gpu);
    cpu->add_in_place(x.cpu, y.cpu);
    const std::string what = fmt::format("{}x{}", rows, width);
    expect_close(x.gpu, x.cpu, 1e-2, "add " + what);
    const int64_t begin = width / 3, count = width - width / 3 - 1;
    expect_close(gpu->slice_columns(y.gpu, begin, count), cpu->slice_columns(y.cpu, begin, count), 0, "slice " + what);
    const auto gate_up = input(random_bf16_values(rows * 2 * width, 13, 2.0f), {rows, 2 * width});
    expect_close(gpu->silu_mul(gate_up.gpu), cpu->silu_mul(gate_up.cpu), 1e-2, "silu_mul " + what);
  }
  auto x = input(random_bf16_values(4, 1), {2, 2});
  EXPECT_THROW(gpu->slice_columns(x.gpu, 1, 2), Error);
}

// Rotate-half (Llama) and interleaved pairs (DeepSeek's rope_interleave, e.g. MLA's 64-dim rotary key of one head).
TEST_F(CudaOpsTest, RopeFullAndPartialWithScaling) {
  for (auto [tokens, cached, heads, head_dim, rotary, scaling, interleaved] :
       {std::tuple{5, 0, 4, 16, 16, 1.0f, false}, {1, 700, 8, 128, 128, 1.0f, false}, {33, 20, 2, 64, 32, 1.2f, false},
        {9, 3000, 3, 256, 64, 1.0f, false}, {7, 0, 4, 8, 8, 1.0f, true}, {3, 900, 1, 64, 64, 1.3f, true},
        {17, 40, 16, 64, 64, 1.0f, true}, {5, 10, 2, 96, 32, 1.0f, true}}) {
    const std::vector<float> inv_freq = testing::rope_inv_freq(rotary);
    RopeTable cpu_table{cpu->from_host_f32(inv_freq, {rotary / 2}), rotary, scaling, interleaved};
    RopeTable gpu_table{gpu->from_host_f32(inv_freq, {rotary / 2}), rotary, scaling, interleaved};
    auto x = input(random_bf16_values(tokens * heads * head_dim, 14), {tokens, heads, head_dim});
    const ForwardBatch batch = one_sequence_batch(tokens, cached, 100, 15);
    const auto cpu_step = cpu->begin_step(batch);
    const auto gpu_step = gpu->begin_step(batch);
    cpu->rope(x.cpu, cpu_table, *cpu_step);
    gpu->rope(x.gpu, gpu_table, *gpu_step);
    expect_close(x.gpu, x.cpu, 1e-2,
                 fmt::format("rope {} tokens at {}, dim {} rotary {}{}", tokens, cached, head_dim, rotary,
                             interleaved ? " interleaved" : ""));
  }
}

// DeepSeek-V4 rotates the last dims of a head (rotate-half or interleaved pairs), forward and back.
TEST_F(CudaOpsTest, RopeRotatesTheLastDimsAsTheCpuDoes) {
  for (const bool interleaved : {false, true}) {
    const std::vector<float> inv_freq = testing::rope_inv_freq(8);
    RopeTable cpu_table{cpu->from_host_f32(inv_freq, {4}), 8, 1.0f, interleaved, true};
    RopeTable gpu_table{gpu->from_host_f32(inv_freq, {4}), 8, 1.0f, interleaved, true};
    auto x = input(random_bf16_values(3 * 2 * 16, 1), {3, 2, 16});
    const ForwardBatch batch = one_sequence_batch(3, 4, 10, 1);  // the steps refer to it
    const auto gpu_step = gpu->begin_step(batch);
    const auto cpu_step = cpu->begin_step(batch);
    gpu->rope(x.gpu, gpu_table, *gpu_step);
    cpu->rope(x.cpu, cpu_table, *cpu_step);
    const std::string what = interleaved ? "interleaved" : "rotate-half";
    EXPECT_LE(relative_error(gpu->to_host_f32(x.gpu), cpu->to_host_f32(x.cpu)), 1e-2) << what;
    gpu->rope_inverse(x.gpu, gpu_table, *gpu_step);
    cpu->rope_inverse(x.cpu, cpu_table, *cpu_step);
    EXPECT_LE(relative_error(gpu->to_host_f32(x.gpu), cpu->to_host_f32(x.cpu)), 1e-2) << what << ", back";
  }
}

// MLA's absorbed projections: [T, heads, K] x [heads, N, K]^T per head, the fixture's and DeepSeek-V3's shapes
// (128 heads, 128 -> 512 and 512 -> 128), a tensor-parallel rank's 16 heads, odd sizes.
TEST_F(CudaOpsTest, GroupedLinearMatchesCpu) {
  for (auto [tokens, groups, n, k] : {std::tuple{5, 4, 32, 16}, {5, 4, 16, 32}, {1, 128, 512, 128}, {37, 128, 128, 512},
                                      {300, 16, 512, 128}, {3, 3, 24, 40}}) {
    const auto x = input(random_bf16_values(tokens * groups * k, 31), {tokens, groups, k});
    const auto w = weight(random_bf16_values(groups * n * k, 32, 0.1f), {groups, n, k});
    expect_close(gpu->grouped_linear(x.gpu, w.gpu), cpu->grouped_linear(x.cpu, w.cpu), 1e-2,
                 fmt::format("grouped_linear {} tokens, {} groups, {} <- {}", tokens, groups, n, k));
  }
  const auto x = input(random_bf16_values(2 * 2 * 8, 1), {2, 2, 8});
  const auto w = weight(random_bf16_values(2 * 4 * 16, 2), {2, 4, 16});
  EXPECT_THROW(gpu->grouped_linear(x.gpu, w.gpu), Error);
}

TEST_F(CudaOpsTest, ConcatColumnsMatchesCpu) {
  for (auto [rows, a_width, b_width] : {std::tuple{5, 32, 8}, {512, 512, 64}, {1, 7, 3}}) {
    const auto a = input(random_bf16_values(rows * a_width, 41), {rows, a_width});
    const auto b = input(random_bf16_values(rows * b_width, 42), {rows, b_width});
    expect_close(gpu->concat_columns(a.gpu, b.gpu), cpu->concat_columns(a.cpu, b.cpu), 0,
                 fmt::format("concat {} rows of {} + {}", rows, a_width, b_width));
  }
  const auto a = input(random_bf16_values(8, 1), {2, 4});
  const auto b = input(random_bf16_values(12, 2), {3, 4});
  EXPECT_THROW(gpu->concat_columns(a.gpu, b.gpu), Error);
}

TEST_F(CudaOpsTest, StoreKvAndFusedRopeStoreKvFillTheSameSlots) {
  const int kv_heads = 2, heads = 4, block_size = 16, num_blocks = 12;
  // Two sequences with scattered blocks, one with cached context.
  ForwardBatch batch;
  batch.sequences.push_back({0, 21, {{7, 2}}});
  batch.sequences.push_back({40, 9, {{0, 11, 5, 9}}});
  batch.token_ids.assign(30, 1);
  // Full and partial rotation, on the fused kernel's 16-byte path (rotary dims multiple of 16) and off it.
  for (auto [head_dim, rotary, fused] : {std::tuple{32, 32, false}, {32, 32, true}, {64, 32, true}, {24, 8, true}}) {
    const std::vector<KvLayerSpec> layers = {{kv_heads, head_dim, head_dim}};
    const std::vector<float> inv_freq = testing::rope_inv_freq(rotary);
    RopeTable cpu_table{cpu->from_host_f32(inv_freq, {rotary / 2}), rotary, 1.0f};
    RopeTable gpu_table{gpu->from_host_f32(inv_freq, {rotary / 2}), rotary, 1.0f};
    KvCache cpu_cache = cpu->allocate_kv_cache(layers, num_blocks, block_size);
    KvCache gpu_cache = gpu->allocate_kv_cache(layers, num_blocks, block_size);
    auto q = input(random_bf16_values(30 * heads * head_dim, 16), {30, heads, head_dim});
    auto k = input(random_bf16_values(30 * kv_heads * head_dim, 17), {30, kv_heads, head_dim});
    const auto v = input(random_bf16_values(30 * kv_heads * head_dim, 18), {30, kv_heads, head_dim});
    const auto cpu_step = cpu->begin_step(batch);
    const auto gpu_step = gpu->begin_step(batch);
    cpu->rope_store_kv(q.cpu, k.cpu, v.cpu, {}, cpu_table, cpu_cache, 0, *cpu_step);
    if (fused) {
      gpu->rope_store_kv(q.gpu, k.gpu, v.gpu, {}, gpu_table, gpu_cache, 0, *gpu_step);
    } else {
      gpu->rope(q.gpu, gpu_table, *gpu_step);
      gpu->rope(k.gpu, gpu_table, *gpu_step);
      gpu->store_kv(gpu_cache, 0, k.gpu, v.gpu, *gpu_step);
    }
    const std::string what = fmt::format("{}, head_dim {} rotary {}", fused ? "fused" : "separate", head_dim, rotary);
    expect_close(q.gpu, q.cpu, 1e-2, "query " + what);
    // Only the step's slots were written (the CPU cache's other slots are uninitialized).
    const std::vector<int64_t> slots = batch_slots(batch, block_size);
    for (auto [gpu_t, cpu_t, tolerance, name] : {std::tuple{&gpu_cache.keys[0], &cpu_cache.keys[0], 1e-2, "keys"},
                                                 {&gpu_cache.values[0], &cpu_cache.values[0], 0.0, "values"}}) {
      const auto a = gpu->to_host_f32(*gpu_t);
      const auto b = cpu->to_host_f32(*cpu_t);
      const int64_t row = kv_heads * head_dim;
      std::vector<float> written_a, written_b;
      for (int64_t slot : slots) {
        written_a.insert(written_a.end(), a.begin() + slot * row, a.begin() + (slot + 1) * row);
        written_b.insert(written_b.end(), b.begin() + slot * row, b.begin() + (slot + 1) * row);
      }
      EXPECT_LE(relative_error(written_a, written_b), tolerance) << name << " " << what;
    }
  }
}

TEST_F(CudaOpsTest, StoreKvRejectsShortBlockTable) {
  KvCache cache = gpu->allocate_kv_cache({{1, 8, 8}}, 4, 16);
  ForwardBatch batch;
  batch.sequences.push_back({10, 10, {{0}}});  // 20 tokens need 2 blocks
  batch.token_ids.assign(10, 0);
  const auto step = gpu->begin_step(batch);
  const auto k = input(random_bf16_values(10 * 8, 1), {10, 1, 8});
  EXPECT_THROW(gpu->store_kv(cache, 0, k.gpu, k.gpu, *step), Error);
}

TEST_F(CudaOpsTest, GatherLogitRowsAndArgmax) {
  const int tokens = 12, hidden = 40;
  ForwardBatch batch;
  batch.token_ids.assign(tokens, 0);
  batch.sequences.push_back({0, 5, {{0}}});
  batch.sequences.push_back({0, 7, {{1}}});
  batch.logit_rows = {4, 11, 0};
  const auto x = input(random_bf16_values(tokens * hidden, 19), {tokens, hidden});
  const auto cpu_step = cpu->begin_step(batch);
  const auto gpu_step = gpu->begin_step(batch);
  expect_close(gpu->gather_logit_rows(x.gpu, *gpu_step), cpu->gather_logit_rows(x.cpu, *cpu_step), 0, "gather");

  // Every token's row in order: the rows themselves.
  batch.logit_rows.resize(tokens);
  std::iota(batch.logit_rows.begin(), batch.logit_rows.end(), 0);
  const auto gpu_all = gpu->begin_step(batch);
  EXPECT_EQ(gpu->gather_logit_rows(x.gpu, *gpu_all).data, x.gpu.data);

  // Rows of several blocks each (up to 16 rows) and of one (17); an odd vocabulary leaves rows unaligned.
  for (int vocab : {32000, 100003}) {
    for (int rows : {1, 3, 17}) {
      auto values = random_bf16_values(rows * vocab, 20 + rows);
      values[vocab - 1] = 100.0f;  // a maximum in the last column
      if (rows > 1) values[vocab + 5] = values[vocab + 9] = 50.0f;  // a tie: the first index wins
      if (rows > 2) values[2 * vocab + 8195] = values[2 * vocab + 3 * 8192 + 1] = 60.0f;  // a tie across blocks
      const auto logits = input(values, {rows, vocab});
      EXPECT_EQ(gpu->to_host_i32(gpu->argmax(logits.gpu)), cpu->to_host_i32(cpu->argmax(logits.cpu))) << rows;
      // float32 logits (e.g. from from_host_f32) work too
      EXPECT_EQ(gpu->to_host_i32(gpu->argmax(gpu->from_host_f32(values, {rows, vocab}))),
                cpu->to_host_i32(cpu->argmax(logits.cpu)));
    }
  }
}

TEST_F(CudaOpsTest, BeginStepRejectsBadLogitRow) {
  ForwardBatch batch;
  batch.token_ids = {1};
  batch.sequences.push_back({0, 1, {{0}}});
  batch.logit_rows = {1};
  EXPECT_THROW(gpu->begin_step(batch), Error);
}

}  // namespace
}  // namespace tern
