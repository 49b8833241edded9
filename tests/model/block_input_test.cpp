// BlockInput (src/model/layers/block_input.h) against values computed by hand: the previous block's output is added
// into the residual exactly once, whichever of linear and normalized a block asks for first, and the projection
// is of the normalized sum.
#include <gtest/gtest.h>

#include <cmath>

#include "model/layers/block_input.h"

namespace tern {
namespace {

constexpr float kEps = 1e-6f;

class BlockInputTest : public ::testing::Test {
 protected:
  Tensor tensor(std::vector<float> values, std::vector<int64_t> shape) { return backend_->from_host_f32(values, shape); }
  std::vector<float> host(const Tensor& t) { return backend_->to_host_f32(t); }

  // rms_norm([1, 2, 3, 4] + [1, 0, -1, 2]) * [1, 0.5, 2, 1]: the sum is [2, 2, 2, 6], its mean square 12.
  std::vector<float> expected_normalized() {
    const float inv = 1.0f / std::sqrt(12.0f + kEps);
    return {2 * inv, 1 * inv, 4 * inv, 6 * inv};
  }
  void expect_near(const std::vector<float>& got, const std::vector<float>& want) {
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5) << i;
  }

  std::unique_ptr<Backend> backend_ = make_cpu_backend(1);
  Tensor residual_ = tensor({1, 2, 3, 4}, {1, 4});
  const Tensor addend_ = tensor({1, 0, -1, 2}, {1, 4});
  const Tensor norm_ = tensor({1, 0.5f, 2, 1}, {4});
};

TEST_F(BlockInputTest, LinearProjectsTheNormalizedSumAndAddsOnce) {
  const BlockInput input(*backend_, residual_, addend_, norm_, kEps);
  const Tensor weight = tensor({1, 0, 0, 0, 0, 1, 1, 1}, {2, 4});
  const auto x = expected_normalized();
  expect_near(host(input.linear(weight)), {x[0], x[1] + x[2] + x[3]});
  expect_near(host(residual_), {2, 2, 2, 6});
  expect_near(host(input.normalized()), x);  // the norm of the updated residual, not added twice
  expect_near(host(input.linear(weight)), {x[0], x[1] + x[2] + x[3]});
  expect_near(host(residual_), {2, 2, 2, 6});
}

TEST_F(BlockInputTest, NormalizedFirstAddsOnce) {
  const BlockInput input(*backend_, residual_, addend_, norm_, kEps);
  expect_near(host(input.normalized()), expected_normalized());
  expect_near(host(input.normalized()), expected_normalized());
  expect_near(host(residual_), {2, 2, 2, 6});
}

TEST_F(BlockInputTest, WithoutAddendTheResidualIsOnlyRead) {
  Tensor residual = tensor({2, 2, 2, 6}, {1, 4});
  const BlockInput input(*backend_, residual, std::nullopt, norm_, kEps);
  expect_near(host(input.normalized()), expected_normalized());
  expect_near(host(residual), {2, 2, 2, 6});
}

}  // namespace
}  // namespace tern
