#pragma once
// Weight quantization with power-of-two scales (scale_fmt "ue8m0"), DeepSeek-V4's scheme: its inference/kernel.py
// act_quant (FP8) and fp4_act_quant (FP4) with the scale rounded as fast_round_scale does. Per block:
//   FP8 e4m3, 2-D blocks (128 x 128 for weights, model.py's Linear): amax = max(max |x|, 1e-4),
//       scale = 2^ceil(log2(amax / 448)), code = e4m3(clamp(x / scale, -448, 448));
//   FP4 e2m1, 1 x 32 groups along the input: amax = max(max |x|, 6 x 2^-126),
//       scale = 2^ceil(log2(amax / 6)), code = e2m1(clamp(x / scale, -6, 6));
// each code the nearest, ties to even; the scale is stored as its e8m0 byte (exponent + 127). Rounding the scale up
// keeps every x / scale within the format's range, so only the elements' rounding loses precision.
#include <cstdint>
#include <vector>

#include "core/tensor_info.h"

namespace tern {

struct Ue8m0Weight {
  std::vector<uint8_t> codes;      // FP8: e4m3 codes [rows, columns]; FP4: e2m1 pairs [rows, columns / 2], element
                                   // 2j in the low nibble of byte j
  std::vector<uint8_t> exponents;  // e8m0 bytes [scale_rows, scale_columns]: scale = 2^(byte - 127)
  std::vector<int64_t> scale_shape;
  std::vector<float> dequantized;  // [rows, columns]: code value x scale, which every format above holds exactly
};

// `weight` (2-D; BF16, F16 or F32) as e4m3 in block_rows x block_columns blocks, edge blocks partial. Fails naming
// the tensor for another shape or dtype, or a value that is not finite.
Ue8m0Weight quantize_fp8_ue8m0(const TensorInfo& weight, int64_t block_rows = 128, int64_t block_columns = 128);

// `weight` (2-D; BF16, F16 or F32, columns a multiple of `group`) as e2m1 in 1 x group groups. Fails naming the
// tensor for another shape or dtype, or a value that is not finite.
Ue8m0Weight quantize_fp4_ue8m0(const TensorInfo& weight, int64_t group = 32);

}  // namespace tern
