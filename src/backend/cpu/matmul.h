#pragma once
// y[t, n] = sum_k x[t, k] * w[n, k] + bias[n] over float32 activations and bf16 or float32 weights.
// Each output element is computed by the same sequence of operations whatever the number of rows in the call,
// so a request's results do not depend on what it is batched with (batch invariance).
// AVX2+FMA is the baseline; AVX-512 is used where the processor has it (cpu_isa.h).
#include <cstdint>

namespace tern::cpu {

void matmul_bf16(const float* x, int64_t num_rows, int64_t k, const uint16_t* w, int64_t n, const float* bias,
                 float* y);
void matmul_f32(const float* x, int64_t num_rows, int64_t k, const float* w, int64_t n, const float* bias, float* y);

}  // namespace tern::cpu
