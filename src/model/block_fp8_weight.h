#pragma once
// Online FP8 (--quantization fp8, vLLM's online dynamic FP8): an unquantized linear weight quantized at load into the
// layout of a block-FP8 checkpoint (docs/quantization.md), so that the backends take it as they take one. Each
// 128x128 block (edge blocks partial, as in DeepSeek-V3's checkpoints) gets the scale amax(|block|) / 448, 448 being
// e4m3fn's largest value (transformers' Fp8Quantize, DeepSeek's scheme), and element x the e4m3 code nearest
// x / scale, ties to even: it dequantizes to code x scale, as a checkpoint's `weight_scale_inv` does.
//
// An FP4 weight (DeepSeek-V4's experts: e2m1 codes with an e8m0 scale per 32 inputs) is repacked the same way with
// a power-of-two scale, the least at or above amax / 448 (DeepSeek's ue8m0 rule): its values are e2m1 values (one
// mantissa bit) times powers of two, the block's largest lands in (224, 448], so each value is an e4m3 code times
// the scale exactly where its group's scale is within 2^14 of the block's largest group's (e4m3's smallest
// subnormal is 2^-9); a value past that rounds to the nearest code. FP8 kernels then multiply FP4 experts (W8A8 on
// Hopper's FP8 tensor cores for prefill) at twice their bytes.
#include <cstdint>
#include <vector>

#include "core/tensor_info.h"

namespace tern {

class BlockFp8Weight {
 public:
  static constexpr int64_t kBlockSize = 128;

  // Quantizes `source` (2-D; BF16, F16, F32, or F4_E2M1 with its block scales) in blocks of block_rows x
  // block_columns; fails naming the tensor for another shape or dtype, or a value that is not finite (its block
  // would have no scale).
  explicit BlockFp8Weight(const TensorInfo& source, int64_t block_rows = kBlockSize,
                          int64_t block_columns = kBlockSize);
  BlockFp8Weight(const BlockFp8Weight&) = delete;  // info() points into this object
  BlockFp8Weight& operator=(const BlockFp8Weight&) = delete;

  // F8_E4M3 [rows, columns] under the weight's name, with its block_scales: F32 [ceil(rows / block_rows),
  // ceil(columns / block_columns)] of the whole weight.
  const TensorInfo& info() const { return weight_; }

 private:
  std::vector<uint8_t> codes_;
  std::vector<float> scale_values_;
  TensorInfo scales_;
  TensorInfo weight_;
};

}  // namespace tern
