// The block-FP8 GEMM (kernels/linear/fp8_gemm.h) on its 128 x 128 tiles against the float64 product of the same
// codes and scales (the tensor cores keep about 14 bits of a 128-deep slice's sum, DeepSeek-V3's report says; a
// scale of another row, block or slice would be off by 2x or more): products tall enough for two consumer
// warpgroups, with a partial last weight tile, a partial last row tile, K past a last full slice, odd and even
// slice counts (the two partial sums take the slices in turn), every output written. Skips without a GPU.
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "linear/fp8_gemm.h"
#include "kernels/device_test_buffers.h"

namespace tern::kernels {
namespace {

using testing::has_gpu;
using testing::to_device;

// Random finite e4m3 codes (no NaN) and their values.
void random_codes(size_t count, std::mt19937& rng, std::vector<__nv_fp8_e4m3>& codes, std::vector<float>& values) {
  std::uniform_int_distribution<int> byte(0, 255);
  codes.resize(count);
  values.resize(count);
  for (size_t i = 0; i < count; ++i) {
    int code = byte(rng);
    if ((code & 0x7f) == 0x7f) code &= 0xfe;
    codes[i].__x = static_cast<__nv_fp8_storage_t>(code);
    values[i] = static_cast<float>(codes[i]);
  }
}

struct Product {
  int m, n, k;
};

void PrintTo(const Product& s, std::ostream* os) { *os << s.m << " x " << s.n << " x " << s.k; }

class Fp8GemmTest : public ::testing::TestWithParam<Product> {};

TEST_P(Fp8GemmTest, MatchesFloat64) {
  if (!has_gpu()) GTEST_SKIP() << "no GPU";
  const auto [m, n, k] = GetParam();
  const int k_blocks = (k + 127) / 128, n_blocks = (n + 127) / 128;
  std::mt19937 rng(m * 31 + n);
  std::vector<__nv_fp8_e4m3> x_codes, w_codes;
  std::vector<float> x_values, w_values;
  random_codes(static_cast<size_t>(m) * k, rng, x_codes, x_values);
  random_codes(static_cast<size_t>(n) * k, rng, w_codes, w_values);
  // Scales: x's [k_blocks, m], the weight's [n_blocks, k_blocks]; powers of two apart, so a scale taken from
  // another row or block shows.
  std::uniform_int_distribution<int> exponent(-12, -4);
  std::vector<float> x_scales(static_cast<size_t>(k_blocks) * m), w_scales(static_cast<size_t>(n_blocks) * k_blocks);
  for (float& s : x_scales) s = std::ldexp(1.0f, exponent(rng));
  for (float& s : w_scales) s = std::ldexp(1.0f, exponent(rng));

  std::vector<double> expected(static_cast<size_t>(m) * n);
  for (int r = 0; r < m; ++r) {
    for (int j = 0; j < n; ++j) {
      double sum = 0.0;
      for (int c = 0; c < k; ++c) {
        const double scale = static_cast<double>(x_scales[c / 128 * m + r]) * w_scales[j / 128 * k_blocks + c / 128];
        sum += scale * x_values[static_cast<size_t>(r) * k + c] * w_values[static_cast<size_t>(j) * k + c];
      }
      expected[static_cast<size_t>(r) * n + j] = sum;
    }
  }

  Fp8GemmParams p;
  p.x = to_device(x_codes);
  p.x_scales = to_device(x_scales);
  p.x_scale_stride = m;
  p.weight = {to_device(w_codes), to_device(w_scales), k_blocks};
  p.f32_out = true;
  p.m = m;
  p.n = n;
  p.k = k;
  ASSERT_EQ(fp8_gemm_workspace_floats(m, n, k), 0) << "a product this wide is not split";
  float* out = to_device(std::vector<float>(static_cast<size_t>(m) * n, NAN));  // NaN until written
  p.out = out;
  launch_fp8_gemm(p, nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<float> got(static_cast<size_t>(m) * n);
  ASSERT_EQ(cudaMemcpy(got.data(), out, got.size() * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  cudaFree(out);
  double error = 0.0, norm = 0.0;
  for (size_t i = 0; i < expected.size(); ++i) {
    error += (got[i] - expected[i]) * (got[i] - expected[i]);
    norm += expected[i] * expected[i];
  }
  EXPECT_LE(std::sqrt(error / norm), 1e-3);
  cudaFree(const_cast<__nv_fp8_e4m3*>(p.x));
  cudaFree(const_cast<float*>(p.x_scales));
  cudaFree(const_cast<__nv_fp8_e4m3*>(p.weight.codes));
  cudaFree(const_cast<float*>(p.weight.scales));
}

// 300 rows: three 128-row tiles, the last partial, by 129 weight tiles, the last of 64 rows, three slices, the last
// partial; 1,024 rows: eight whole tiles by 34 whole weight tiles, three slices; then 8 x 17 tiles of four slices.
INSTANTIATE_TEST_SUITE_P(Shapes, Fp8GemmTest,
                         ::testing::Values(Product{300, 16448, 272}, Product{1024, 4352, 384}, Product{1024, 2176, 512}),
                         [](const ::testing::TestParamInfo<Product>& info) {
                           const Product& s = info.param;
                           return std::to_string(s.m) + "x" + std::to_string(s.n) + "x" + std::to_string(s.k);
                         });

}  // namespace
}  // namespace tern::kernels
