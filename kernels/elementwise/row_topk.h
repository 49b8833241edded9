#pragma once
// Exact top-k of float32 rows on the device: per row the indices of its k largest values, best first, equal values
// to the lower index, NaN above everything and -0 equal to +0; -1 past the row's length. One block per row, two
// passes over the row: a histogram of coarse buckets (the value rounded to half precision, 11 bits of it: 32
// buckets an octave) finds the bucket of the k-th value; the second pass takes the values above that bucket and
// gathers the bucket's own values to shared memory, where their exact ranks (float32 order key, then index) pick
// the rest. A bucket too full for shared memory (many equal values) falls back to a radix select over the whole row
// on the float32 keys. The winners' places come from counting, not a sorting network. The row is never copied or
// sorted whole: the design of DeepSeek's DeepSelect and vLLM's top-k for the Lightning Indexer, in one launch.
#include <cuda_runtime.h>

#include <cstdint>

namespace tern::kernels {

constexpr int kMaxRowTopK = 2048;

struct RowTopkParams {
  const float* values = nullptr;         // [num_rows, row_stride]
  int64_t row_stride = 0;
  const int32_t* row_lengths = nullptr;  // [num_rows] on the device, or null: every row `length` long
  int length = 0;
  int num_rows = 0;
  int k = 0;              // 1 to kMaxRowTopK
  int32_t* out = nullptr;  // [num_rows, k]
};

void launch_row_topk(const RowTopkParams& params, cudaStream_t stream);

}  // namespace tern::kernels
