#include "backend/cpu/host_collective.h"

#include <algorithm>
#include <cstring>

namespace tern {

HostCollective::HostCollective(int size) : size_(size), barrier_(size), buffers_(static_cast<size_t>(size)) {}

void HostCollective::all_reduce_sum(int rank, float* values, int64_t count) {
  buffers_[rank] = values;
  barrier_.arrive_and_wait();
  std::vector<float> sum(buffers_[0], buffers_[0] + count);
  for (int r = 1; r < size_; ++r) {
    const float* other = buffers_[r];
    for (int64_t i = 0; i < count; ++i) sum[i] += other[i];
  }
  // Nobody writes until everyone has read.
  barrier_.arrive_and_wait();
  std::copy(sum.begin(), sum.end(), values);
}

void HostCollective::all_gather_columns(int rank, const float* shard, int64_t rows, int64_t columns, float* out,
                                        int64_t num_columns) {
  buffers_[rank] = shard;
  barrier_.arrive_and_wait();
  for (int r = 0; r < size_; ++r) {
    const int64_t begin = r * columns;
    const int64_t width = std::clamp<int64_t>(num_columns - begin, 0, columns);
    for (int64_t row = 0; row < rows && width > 0; ++row) {
      std::memcpy(out + row * num_columns + begin, buffers_[r] + row * columns, width * sizeof(float));
    }
  }
  barrier_.arrive_and_wait();
}

}  // namespace tern
