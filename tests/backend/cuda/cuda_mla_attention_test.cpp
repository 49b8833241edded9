// MLA attention on the GPU (absorbed form: a keys-only cache of one latent "head" per token, values the keys' first
// kv_lora_rank dims) against the CPU reference: prefill tiles over cached context and split-KV decode in one step,
// several sequences, block sizes from 1 to 64, DeepSeek-V3's 128 heads of 512 + 64, a tensor-parallel rank's 16,
// the fixture's 4 heads of 32 + 8, head counts that leave partial 64-row blocks, dims that are multiples of 8 but
// not of 16, and a value as wide as the largest key; with a bf16 cache, and with an FP8 one (--kv-cache-dtype
// fp8_e4m3) of a per-tensor scale of 2, whose codes the two backends take of the same bf16 latents.
#include <numeric>

#include "cuda_test_util.h"

namespace tern {
namespace {

using testing::random_bf16_values;
using testing::relative_error;

struct MlaCase {
  int heads, kv_lora_rank, rope_dim, block_size;
  std::vector<std::pair<int, int>> sequences;  // (cached tokens, new tokens)
};

std::string describe(const MlaCase& c) {
  return fmt::format("{} heads of {} + {}, blocks of {}, {} sequences", c.heads, c.kv_lora_rank, c.rope_dim,
                     c.block_size, c.sequences.size());
}

KvLayerSpec latent_layer(int key_dim) {
  KvLayerSpec spec{1, key_dim, 0};
  spec.kind = KvLayerKind::mla_latent;
  return spec;
}

class CudaMlaAttentionTest : public testing::CudaVsCpuTest, public ::testing::WithParamInterface<MlaCase> {
 protected:
  void expect_matches_cpu(KvCacheDtype kv_dtype);
};

void CudaMlaAttentionTest::expect_matches_cpu(KvCacheDtype kv_dtype) {
  const MlaCase& c = GetParam();
  const int key_dim = c.kv_lora_rank + c.rope_dim;
  const int block_size = c.block_size;
  const testing::PagedSteps steps = testing::paged_steps(c.sequences, block_size);
  const ForwardBatch& fill = steps.fill;
  const ForwardBatch& step_batch = steps.step;
  std::vector<KvLayerSpec> layers = {latent_layer(key_dim)};
  layers[0].key_scale = 2.0f;  // read only by an FP8 cache
  KvCache cpu_cache = cpu->allocate_kv_cache(layers, steps.num_blocks, block_size, kv_dtype);
  KvCache gpu_cache = gpu->allocate_kv_cache(layers, steps.num_blocks, block_size, kv_dtype);
  const int64_t fill_tokens = fill.num_tokens();
  const auto latents = input(random_bf16_values(fill_tokens * key_dim, 1), {fill_tokens, 1, key_dim});
  {
    const auto cpu_fill = cpu->begin_step(fill);
    const auto gpu_fill = gpu->begin_step(fill);
    cpu->store_kv(cpu_cache, 0, latents.cpu, latents.cpu, *cpu_fill);
    gpu->store_kv(gpu_cache, 0, latents.gpu, latents.gpu, *gpu_fill);
  }

  const int64_t tokens = step_batch.num_tokens();
  // Queries scaled so that softmax is peaked enough for errors in the weights to show.
  const auto q = input(random_bf16_values(tokens * c.heads * key_dim, 3, 2.0f), {tokens, c.heads, key_dim});
  AttentionParams params;
  params.scale = 1.0f / std::sqrt(static_cast<float>(key_dim));
  params.values_from_keys = c.kv_lora_rank;
  const auto cpu_step = cpu->begin_step(step_batch);
  const auto gpu_step = gpu->begin_step(step_batch);
  const Tensor gpu_out = gpu->attention(q.gpu, gpu_cache, 0, params, *gpu_step);
  ASSERT_EQ(gpu_out.shape, (std::vector<int64_t>{tokens, c.heads, c.kv_lora_rank})) << describe(c);
  const auto expected = cpu->to_host_f32(cpu->attention(q.cpu, cpu_cache, 0, params, *cpu_step));
  const auto actual = gpu->to_host_f32(gpu_out);
  ASSERT_EQ(actual.size(), expected.size());
  EXPECT_LE(relative_error(actual, expected), 2e-2) << describe(c);
  // Row by row too, so that a wrong row of small values cannot hide behind the global maximum.
  const int64_t row = c.kv_lora_rank;
  for (int64_t r = 0; r < tokens * c.heads; ++r) {
    const std::vector<float> a(actual.begin() + r * row, actual.begin() + (r + 1) * row);
    const std::vector<float> b(expected.begin() + r * row, expected.begin() + (r + 1) * row);
    ASSERT_LE(relative_error(a, b), 5e-2) << describe(c) << ": token " << r / c.heads << " head " << r % c.heads;
  }
}

TEST_P(CudaMlaAttentionTest, MatchesCpu) { expect_matches_cpu(KvCacheDtype::automatic); }

// Both backends cache the codes of latent / 2 and read code x 2, which is a bf16 value: the same keys.
TEST_P(CudaMlaAttentionTest, Fp8CacheMatchesCpu) {
  if (GetParam().block_size % 16 != 0) GTEST_SKIP() << "FP8 caches take blocks of multiples of 16 tokens";
  expect_matches_cpu(KvCacheDtype::fp8_e4m3);
}

// Mixed batches: prefills (tiles of 128 tokens and a partial one) with and without cached context, decodes with
// short and long contexts (several KV shares, partial key tiles), short chunks that take the decode path, a first
// token.
const std::vector<std::pair<int, int>> kMixed = {{0, 200}, {100, 37}, {300, 1}, {2100, 1}, {5, 3}, {0, 1}};
// Decodes only, as a recorded step runs them.
const std::vector<std::pair<int, int>> kDecodes = {{4000, 1}, {1234, 1}, {31, 1}, {32, 1}, {0, 1}, {700, 2}};

std::vector<std::pair<int, int>> random_sequences(uint32_t seed, int count) {
  std::mt19937 rng(seed);
  std::vector<std::pair<int, int>> sequences;
  for (int i = 0; i < count; ++i) {
    const int cached = std::uniform_int_distribution<int>(0, 2000)(rng);
    const bool prefill = std::uniform_int_distribution<int>(0, 3)(rng) == 0;
    sequences.emplace_back(cached, prefill ? std::uniform_int_distribution<int>(2, 150)(rng) : 1);
  }
  return sequences;
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CudaMlaAttentionTest,
    ::testing::Values(MlaCase{4, 32, 8, 16, kMixed},                             // the deepseek_v3 fixture
                      MlaCase{4, 32, 8, 1, {{0, 40}, {7, 1}, {0, 7}}},           // blocks of one token
                      MlaCase{128, 512, 64, 64, {{0, 130}, {60, 20}, {1000, 1}, {3000, 1}, {5, 3}}},  // DeepSeek-V3
                      MlaCase{128, 512, 64, 64, kDecodes},
                      MlaCase{16, 512, 64, 16, kMixed},                          // 128 heads over 8 ranks
                      MlaCase{16, 512, 64, 16, kDecodes},
                      MlaCase{72, 64, 8, 32, kMixed},                            // a partial second row block
                      MlaCase{3, 48, 16, 8, kMixed},                             // odd heads, 3 value chunks
                      MlaCase{32, 128, 64, 32, kMixed},                          // values of 128
                      MlaCase{8, 256, 64, 16, kMixed},                           // values of 256
                      MlaCase{4, 560, 16, 16, {{0, 150}, {900, 1}, {40, 5}}},    // values of 560, keys of 576
                      MlaCase{64, 512, 64, 64, random_sequences(21, 10)},
                      MlaCase{16, 32, 8, 16, random_sequences(22, 16)}));

class CudaMlaAttentionRejectsTest : public testing::CudaVsCpuTest {};

TEST_F(CudaMlaAttentionRejectsTest, WindowsSinksAndUnbuiltDims) {
  ForwardBatch batch;
  batch.sequences.push_back({0, 4, {{0}}});
  batch.token_ids.assign(4, 0);
  const auto step = gpu->begin_step(batch);
  const auto sinks = weight(random_bf16_values(4, 1), {4});
  for (auto [rank, rope_dim, window, with_sinks] :
       {std::tuple{32, 8, 2, false}, {32, 8, 0, true}, {30, 6, 0, false}, {576, 8, 0, false}}) {
    const int key_dim = rank + rope_dim;
    KvCache cache = gpu->allocate_kv_cache({latent_layer(key_dim)}, 2, 16);
    const auto q = input(random_bf16_values(4 * 4 * key_dim, 2), {4, 4, key_dim});
    AttentionParams params;
    params.values_from_keys = rank;
    params.sliding_window = window;
    if (with_sinks) params.sinks = &sinks.gpu;
    EXPECT_THROW(gpu->attention(q.gpu, cache, 0, params, *step), Error)
        << rank << " + " << rope_dim << ", window " << window << ", sinks " << with_sinks;
  }
}

}  // namespace
}  // namespace tern
