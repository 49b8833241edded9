#pragma once
// Shared by the CUDA backend tests: the CPU reference and the CUDA backend side by side, inputs rounded to bf16
// so that both backends see exactly the same values, and a skip when no GPU is present.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>
#include <random>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "core/error.h"

namespace tern::testing {

inline std::vector<float> random_bf16_values(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = bf16_to_f32(f32_to_bf16(dist(rng)));
  return v;
}

// max |a - b| / max |b|
inline double relative_error(const std::vector<float>& a, const std::vector<float>& b) {
  double max_diff = 0, max_ref = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    max_diff = std::max(max_diff, std::abs(double(a[i]) - b[i]));
    max_ref = std::max(max_ref, std::abs(double(b[i])));
    if (std::isnan(a[i])) return INFINITY;
  }
  return max_ref > 0 ? max_diff / max_ref : max_diff;
}

// A step over sequences of (cached, new) tokens on a paged cache whose blocks are handed out in a shuffled order
// (block tables are not the identity), and the step that first writes every position of them.
struct PagedSteps {
  ForwardBatch fill;  // every position of every sequence, no cached context
  ForwardBatch step;  // the step under test
  int64_t num_blocks = 0;
};
inline PagedSteps paged_steps(const std::vector<std::pair<int, int>>& sequences, int block_size) {
  int total_blocks = 0;
  for (auto [cached, fresh] : sequences) total_blocks += (cached + fresh + block_size - 1) / block_size;
  std::vector<int32_t> blocks(total_blocks + 3);
  std::iota(blocks.begin(), blocks.end(), 0);
  std::shuffle(blocks.begin(), blocks.end(), std::mt19937(7));
  PagedSteps steps;
  steps.num_blocks = static_cast<int64_t>(blocks.size());
  size_t next_block = 0;
  for (auto [cached, fresh] : sequences) {
    SequenceChunk seq{cached, fresh, {{}}};
    for (int b = 0; b < (cached + fresh + block_size - 1) / block_size; ++b) {
      seq.block_tables[0].push_back(blocks[next_block++]);
    }
    steps.step.sequences.push_back(seq);
    steps.step.token_ids.insert(steps.step.token_ids.end(), fresh, 0);
    steps.fill.sequences.push_back({0, cached + fresh, {seq.block_tables[0]}});
    steps.fill.token_ids.insert(steps.fill.token_ids.end(), cached + fresh, 0);
  }
  return steps;
}

// RoPE's inverse frequencies for `rotary_dim` dims at base `theta`: [rotary_dim / 2].
inline std::vector<float> rope_inv_freq(int rotary_dim, float theta = 10000.0f) {
  std::vector<float> inv_freq(rotary_dim / 2);
  for (int i = 0; i < rotary_dim / 2; ++i) inv_freq[i] = std::pow(theta, -2.0f * i / rotary_dim);
  return inv_freq;
}

// `values` rounded to bf16, as a bf16 tensor of `backend` (loaded as a weight is).
inline Tensor bf16_tensor(Backend& backend, const std::vector<float>& values, std::vector<int64_t> shape) {
  std::vector<uint16_t> bits(values.size());
  for (size_t i = 0; i < values.size(); ++i) bits[i] = f32_to_bf16(values[i]);
  TensorInfo info;
  info.name = "test";
  info.dtype = DType::BF16;
  info.shape = std::move(shape);
  info.data = reinterpret_cast<const std::byte*>(bits.data());
  info.size_bytes = bits.size() * 2;
  const TensorInfo* parts[] = {&info};
  return backend.load_weight(parts);
}

// Routing of `tokens` tokens to `top_k` distinct experts each, spread over all `experts` (other expert-parallel
// ranks' too), with random weights in [0.1, 1); with `crowded`, every token takes experts 0 .. top_k - 1.
struct RandomRouting {
  std::vector<int32_t> ids;  // [tokens, top_k]
  std::vector<float> weights;
};
inline RandomRouting random_routing(int64_t tokens, int64_t experts, int64_t top_k, uint32_t seed,
                                    bool crowded = false) {
  std::mt19937 rng(seed);
  RandomRouting routing;
  for (int64_t t = 0; t < tokens; ++t) {
    std::vector<int32_t> all(experts);
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), rng);
    for (int64_t j = 0; j < top_k; ++j) {
      routing.ids.push_back(crowded ? static_cast<int32_t>(j) : all[j]);
      routing.weights.push_back(std::uniform_real_distribution<float>(0.1f, 1.0f)(rng));
    }
  }
  return routing;
}

class CudaVsCpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
    cpu = make_cpu_backend(2);
    gpu = make_cuda_backend(0);
  }

  // The same bf16 values on both backends: a float32 tensor on the CPU, a bf16 tensor (as the CUDA ops make
  // them) on the GPU.
  struct Pair {
    Tensor cpu, gpu;
  };
  // The routed experts of x on both backends (moe_experts), routed as `routing` (ids and weights [tokens, top_k]).
  Pair moe_experts(const Pair& x, const RandomRouting& routing, int64_t top_k, const ExpertWeights& cpu_experts,
                   const ExpertWeights& gpu_experts, const GluActivation& activation = {}) {
    const int64_t tokens = static_cast<int64_t>(routing.ids.size()) / top_k;
    const ExpertRouting cpu_routing{cpu->from_host_i32(routing.ids, {tokens, top_k}),
                                    cpu->from_host_f32(routing.weights, {tokens, top_k})};
    const ExpertRouting gpu_routing{gpu->from_host_i32(routing.ids, {tokens, top_k}),
                                    gpu->from_host_f32(routing.weights, {tokens, top_k})};
    return {cpu->moe_experts(x.cpu, cpu_routing, cpu_experts, activation),
            gpu->moe_experts(x.gpu, gpu_routing, gpu_experts, activation)};
  }
  Pair input(const std::vector<float>& values, std::vector<int64_t> shape) {
    return {cpu->from_host_f32(values, shape), weight_on(*gpu, values, shape)};
  }
  Pair weight(const std::vector<float>& values, std::vector<int64_t> shape) {
    return {weight_on(*cpu, values, shape), weight_on(*gpu, values, shape)};
  }
  static Tensor weight_on(Backend& backend, const std::vector<float>& values, std::vector<int64_t> shape) {
    return bf16_tensor(backend, values, std::move(shape));
  }

  std::unique_ptr<Backend> cpu, gpu;
};

}  // namespace tern::testing
