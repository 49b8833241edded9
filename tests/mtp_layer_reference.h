#pragma once
// What the MTP layers' tests share: float64 reference math (matrices row-major, a checkpoint tensor as one, RMS norm,
// a linear layer), its comparison with a backend's output, and a batch of one sequence.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "backend/forward_batch.h"
#include "model/checkpoint.h"
#include "model/model.h"

namespace tern::testing {

using Matrix = std::vector<double>;  // row-major

inline Matrix checkpoint_values(const Checkpoint& checkpoint, const std::string& name) {
  const TensorInfo& info = checkpoint.get(name);
  std::vector<float> values(static_cast<size_t>(info.numel()));
  dequantize_to_f32(info, values.data());
  return Matrix(values.begin(), values.end());
}

// rms_norm(x) * weight of each row of x [rows, width].
inline Matrix rms_norm(const Matrix& x, const Matrix& weight, double eps) {
  const size_t width = weight.size();
  Matrix out(x.size());
  for (size_t r = 0; r < x.size() / width; ++r) {
    double sum = 0.0;
    for (size_t i = 0; i < width; ++i) sum += x[r * width + i] * x[r * width + i];
    const double scale = 1.0 / std::sqrt(sum / width + eps);
    for (size_t i = 0; i < width; ++i) out[r * width + i] = x[r * width + i] * scale * weight[i];
  }
  return out;
}

// x [rows, in] times weight [out, in] transposed.
inline Matrix linear(const Matrix& x, const Matrix& weight, size_t in) {
  const size_t rows = x.size() / in, outs = weight.size() / in;
  Matrix out(rows * outs, 0.0);
  for (size_t r = 0; r < rows; ++r) {
    for (size_t o = 0; o < outs; ++o) {
      double sum = 0.0;
      for (size_t i = 0; i < in; ++i) sum += x[r * in + i] * weight[o * in + i];
      out[r * outs + o] = sum;
    }
  }
  return out;
}

inline void expect_near(const std::vector<float>& got, const Matrix& want, double tolerance, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double worst = 0.0;
  for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::abs(got[i] - want[i]));
  EXPECT_LT(worst, tolerance) << what;
}

inline ForwardBatch batch_of(const std::vector<int32_t>& tokens, int32_t num_cached, int32_t num_blocks) {
  ForwardBatch batch;
  batch.token_ids = tokens;
  std::vector<int32_t> table;
  for (int32_t b = 0; b < num_blocks; ++b) table.push_back(b);
  batch.sequences.push_back({num_cached, static_cast<int32_t>(tokens.size()), {table}, 0});
  for (size_t i = 0; i < tokens.size(); ++i) batch.logit_rows.push_back(static_cast<int32_t>(i));
  return batch;
}

// The target's logits and hidden states for one sequence of `tokens` (Model::forward_with_hidden_states), whose
// logits must be those of a plain forward: the same rows through the same ops.
struct TargetStep {
  std::vector<float> logits;
  Tensor hidden_states;
};
inline TargetStep target_step(Model& model, Backend& backend, const std::vector<int32_t>& tokens) {
  const ForwardBatch batch = batch_of(tokens, 0, 1);
  KvCache plain_cache = backend.allocate_kv_cache(model.kv_layers(), 1, 16);
  KvCache hidden_cache = backend.allocate_kv_cache(model.kv_layers(), 1, 16);
  TargetStep step;
  step.logits = backend.to_host_f32(model.forward(*backend.begin_step(batch), plain_cache));
  const Tensor with_hidden = model.forward_with_hidden_states(*backend.begin_step(batch), hidden_cache,
                                                              step.hidden_states);
  EXPECT_EQ(backend.to_host_f32(with_hidden), step.logits);
  return step;
}

}  // namespace tern::testing
