// The host/device arithmetic of the DeepSeek-V4 kernels (kernels/v4/v4_math.h), checked on the CPU against the
// CPU backend's ops and against the definitions they implement.
#include "v4/v4_math.h"

#include <gtest/gtest.h>

#include <vector>

#include "backend/attention_reference.h"
#include "backend/backend.h"

namespace tern::kernels::v4 {
namespace {

using testing::random_values;

TEST(V4Math, HyperMixRowEqualsCpuBackend) {
  auto backend = make_cpu_backend(1);
  const int n = 4, tokens = 5;
  for (const int width : {n, (2 + n) * n}) {
    for (const int iters : {1, 20}) {
      const auto mixes = random_values(tokens * width, 3 + width, 2.0f), base = random_values(width, 4);
      const std::vector<float> scale =
          width == n ? std::vector<float>{0.7f} : std::vector<float>{0.7f, 1.3f, 2.0f};
      const auto reference = backend->to_host_f32(backend->hyper_mix(
          backend->from_host_f32(mixes, {tokens, width}), backend->from_host_f32(base, {width}),
          backend->from_host_f32(scale, {static_cast<int64_t>(scale.size())}), tern::HyperMixParams{n, iters, 1e-6f}));
      std::vector<float> ours(tokens * width);
      for (int t = 0; t < tokens; ++t) {
        hyper_mix_row(mixes.data() + t * width, base.data(), scale.data(), n, width, iters, 1e-6f,
                      ours.data() + t * width);
      }
      for (size_t i = 0; i < ours.size(); ++i) {
        EXPECT_FLOAT_EQ(ours[i], reference[i]) << "width " << width << ", " << iters << " iterations, value " << i;
      }
    }
  }
}

TEST(V4Math, RotatePairEqualsCpuRopeOnTrailingDims) {
  auto backend = make_cpu_backend(1);
  const int head_dim = 32, rotary_dim = 8;
  std::vector<float> inv_freq(rotary_dim / 2);
  for (int i = 0; i < rotary_dim / 2; ++i) inv_freq[i] = std::pow(10000.0f, -2.0f * i / rotary_dim);
  for (const bool interleaved : {true, false}) {
    for (const bool inverse : {false, true}) {
      RopeTable table;
      table.inv_freq = backend->from_host_f32(inv_freq, {rotary_dim / 2});
      table.rotary_dim = rotary_dim;
      table.interleaved = interleaved;
      table.rotate_last_dims = true;
      table.attention_scaling = 0.9f;
      const std::vector<int32_t> positions = {0, 5, 1234};
      const auto values = random_values(positions.size() * head_dim, 9);
      Tensor x = backend->from_host_f32(values, {static_cast<int64_t>(positions.size()), 1, head_dim});
      backend->rope_at(x, table, positions, inverse);
      const auto reference = backend->to_host_f32(x);
      RotarySpec spec{inv_freq.data(), rotary_dim, 0.9f, interleaved, head_dim - rotary_dim};
      std::vector<float> ours = values;
      for (size_t t = 0; t < positions.size(); ++t) {
        for (int pair = 0; pair < rotary_dim / 2; ++pair) {
          rotate_pair(ours.data() + t * head_dim + spec.first_dim, pair, spec, static_cast<float>(positions[t]),
                      inverse);
        }
      }
      for (size_t i = 0; i < ours.size(); ++i) {
        EXPECT_FLOAT_EQ(ours[i], reference[i]) << "interleaved " << interleaved << ", inverse " << inverse;
      }
    }
  }
}

// The sources of a window's entry as compressed_kv.h defines them.
TEST(V4Math, PoolSourcesAreTheWindowAndForCsaThePreviousWindowsFirstHalves) {
  const int rate = 4, dim = 16;
  for (const bool overlapping : {false, true}) {
    for (const int start : {0, 4, 8, 100}) {
      std::vector<PoolSource> expected;
      if (overlapping && start >= rate) {
        for (int j = 0; j < rate; ++j) expected.push_back({start - rate + j, 0});
      }
      for (int j = 0; j < rate; ++j) expected.push_back({start + j, overlapping ? dim : 0});
      ASSERT_EQ(num_pool_sources(start, rate, overlapping), static_cast<int>(expected.size()));
      for (size_t s = 0; s < expected.size(); ++s) {
        const PoolSource source = pool_source(start, static_cast<int>(s), rate, dim, overlapping);
        EXPECT_EQ(source.position, expected[s].position) << "start " << start << ", source " << s;
        EXPECT_EQ(source.feature_offset, expected[s].feature_offset) << "start " << start << ", source " << s;
      }
    }
  }
}

TEST(V4Math, PagedSlotFollowsTheBlockTable) {
  const std::vector<int32_t> tables = {9, 9, 5, 2, 7};  // a sequence's table starting at offset 2
  EXPECT_EQ(paged_slot(tables.data(), 2, 0, 4), 5 * 4);
  EXPECT_EQ(paged_slot(tables.data(), 2, 6, 4), 2 * 4 + 2);
  EXPECT_EQ(paged_slot(tables.data(), 2, 11, 4), 7 * 4 + 3);
}

TEST(V4Math, RanksAheadIsAStrictOrderByScoreThenLowerIndex) {
  const float nan = std::nanf("");
  EXPECT_TRUE(ranks_ahead(2.0f, 5, 1.0f, 0));
  EXPECT_FALSE(ranks_ahead(1.0f, 0, 2.0f, 5));
  EXPECT_TRUE(ranks_ahead(1.0f, 3, 1.0f, 4));
  EXPECT_FALSE(ranks_ahead(1.0f, 4, 1.0f, 3));
  EXPECT_FALSE(ranks_ahead(1.0f, 4, 1.0f, 4));
  EXPECT_TRUE(ranks_ahead(nan, 9, 1e30f, 0));
  EXPECT_FALSE(ranks_ahead(1e30f, 0, nan, 9));
  EXPECT_TRUE(ranks_ahead(0.0f, 1, -INFINITY, 0));
}

}  // namespace
}  // namespace tern::kernels::v4
