// The exact row top-k kernel (kernels/elementwise/row_topk.h) against a sort on the host: the same indices in the
// same order, over ties, NaNs, signed zeros, rows shorter than k and per-row lengths. Skips without a GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "elementwise/row_topk.h"
#include "kernels/device_test_buffers.h"

namespace tern::kernels {
namespace {

using testing::has_gpu;
using testing::to_device;

// The kernel's order: larger first, NaN above everything, -0 equal to +0, equal values by the lower index.
bool ranks_ahead(float a, int i, float b, int j) {
  const bool nan_a = std::isnan(a), nan_b = std::isnan(b);
  if (nan_a != nan_b) return nan_a;
  if (!nan_a && a != b) return a > b;
  return i < j;
}

std::vector<int32_t> reference_topk(const float* row, int n, int k) {
  std::vector<int32_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t i, int32_t j) { return ranks_ahead(row[i], i, row[j], j); });
  order.resize(std::min(n, k));
  order.resize(k, -1);
  return order;
}

// Runs the kernel over rows of `stride` values (lengths per row, or all `stride` long) and checks every row.
void expect_topk(const std::vector<float>& values, int stride, int k, const std::vector<int32_t>& lengths = {}) {
  const int rows = static_cast<int>(values.size() / stride);
  float* d_values = to_device(values);
  int32_t* d_lengths = lengths.empty() ? nullptr : to_device(lengths);
  int32_t* d_out = to_device(std::vector<int32_t>(size_t(rows) * k, 7));
  RowTopkParams p;
  p.values = d_values;
  p.row_stride = stride;
  p.row_lengths = d_lengths;
  p.length = stride;
  p.num_rows = rows;
  p.k = k;
  p.out = d_out;
  launch_row_topk(p, nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<int32_t> out(size_t(rows) * k);
  ASSERT_EQ(cudaMemcpy(out.data(), d_out, out.size() * sizeof(int32_t), cudaMemcpyDeviceToHost), cudaSuccess);
  for (int r = 0; r < rows; ++r) {
    const int n = lengths.empty() ? stride : lengths[r];
    const auto expected = reference_topk(values.data() + size_t(r) * stride, n, k);
    for (int i = 0; i < k; ++i) {
      ASSERT_EQ(out[size_t(r) * k + i], expected[i]) << "row " << r << " of " << n << " values, k " << k
                                                       << ", place " << i;
    }
  }
  cudaFree(d_values);
  cudaFree(d_lengths);
  cudaFree(d_out);
}

std::vector<float> normal_values(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist;
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

class RowTopkTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!has_gpu()) GTEST_SKIP() << "no CUDA device";
  }
};

TEST_F(RowTopkTest, RandomRowsOfEveryLengthAroundK) {
  for (const int n : {1, 7, 511, 512, 513, 4096, 32768}) {
    for (const int k : {1, 64, 512, 2048}) {
      expect_topk(normal_values(size_t(3) * n, n + k), n, k);
    }
  }
}

TEST_F(RowTopkTest, LongRow) { expect_topk(normal_values(size_t(1) << 18, 5), 1 << 18, 512); }

TEST_F(RowTopkTest, TiesAtTheCutGoToTheLowerIndex) {
  // Few distinct values: the k-th value's bucket never empties, so the last digit decides and ties are ranked.
  std::mt19937 rng(3);
  std::vector<float> few(4 * 20000);
  for (auto& x : few) x = static_cast<float>(rng() % 5);
  expect_topk(few, 20000, 512);
  // All equal: the first k indices. More equal values than shared memory holds take the pass over the whole row,
  // with float4 loads (a stride of a multiple of 4) and without.
  expect_topk(std::vector<float>(3 * 9000, 0.25f), 9000, 512);
  expect_topk(std::vector<float>(2 * 7001, -1.5f), 7001, 512);
  expect_topk(std::vector<float>(2 * 3000, 0.0f), 3000, 2048);
}

TEST_F(RowTopkTest, CloseValuesNeedEveryDigit) {
  // One exponent, neighbouring mantissas: the first digit puts everything in one bin.
  std::vector<float> v(2 * 16384);
  std::mt19937 rng(9);
  for (auto& x : v) x = std::nextafter(1.0f, 2.0f) + static_cast<float>(rng() % 3000) * 1e-7f;
  expect_topk(v, 16384, 512);
}

TEST_F(RowTopkTest, NansInfinitiesAndSignedZeros) {
  std::vector<float> v = normal_values(6000, 11);
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  for (int i = 0; i < 6000; i += 7) v[i] = -0.0f;
  for (int i = 3; i < 6000; i += 11) v[i] = 0.0f;
  for (int i = 5; i < 6000; i += 97) v[i] = nan;
  for (int i = 1; i < 6000; i += 101) v[i] = inf;
  for (int i = 2; i < 6000; i += 13) v[i] = -inf;
  v[4] = -nan;
  expect_topk(v, 6000, 512);
  expect_topk(v, 6000, 2048);
  std::vector<float> zeros(5000);
  for (int i = 0; i < 5000; ++i) zeros[i] = i % 2 ? 0.0f : -0.0f;  // all equal: by index
  expect_topk(zeros, 5000, 512);
}

TEST_F(RowTopkTest, PerRowLengthsPadWithMinusOne) {
  const int stride = 3000;
  const std::vector<int32_t> lengths = {0, 1, 100, 511, 512, 513, 2999, 3000};
  expect_topk(normal_values(size_t(lengths.size()) * stride, 13), stride, 512, lengths);
}

TEST_F(RowTopkTest, RejectsBadArguments) {
  RowTopkParams p;
  p.num_rows = 1;
  p.k = kMaxRowTopK + 1;
  EXPECT_THROW(launch_row_topk(p, nullptr), std::invalid_argument);
  p.k = 8;
  p.row_stride = 10;
  p.length = 11;
  EXPECT_THROW(launch_row_topk(p, nullptr), std::invalid_argument);
}

}  // namespace
}  // namespace tern::kernels
