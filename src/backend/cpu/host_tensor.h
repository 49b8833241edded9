#pragma once
// Allocation and small helpers shared by the CPU backend's op files.
#include <span>
#include <vector>

#include "backend/backend.h"

namespace tern::cpu {

// A new, uninitialized tensor in host memory, 64-byte aligned.
Tensor host_tensor(DType dtype, std::vector<int64_t> shape);

// y [num_rows, n] = x [num_rows, k] times rows [first_row, first_row + n) of `weight` (bf16 or f32, [*, k])
// transposed, plus bias [n] when given.
void matmul_rows(const float* x, int64_t num_rows, int64_t k, const Tensor& weight, int64_t first_row, int64_t n,
                 const float* bias, float* y);

// The MoE and rotary ops, kept apart from cpu_backend.cpp so each file holds one family of ops.
Tensor gated_activation(const Tensor& gate_up, const GluActivation& activation);
ExpertRouting route_experts(const Tensor& logits, const RouterParams& params, std::span<const int32_t> token_ids);
Tensor moe_experts(const Tensor& x, const ExpertRouting& routing, const ExpertWeights& experts,
                   const GluActivation& activation);
Tensor grouped_linear(const Tensor& x, const Tensor& weight);
void rope_at(Tensor& x, const RopeTable& table, std::span<const int32_t> positions, bool inverse);

}  // namespace tern::cpu
