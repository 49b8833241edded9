#include "backend/cpu/host_collective.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace tern {

HostCollective::HostCollective(int size)
    : size_(size),
      barrier_(size),
      buffers_(static_cast<size_t>(size)),
      byte_buffers_(static_cast<size_t>(size)),
      counts_(static_cast<size_t>(size)) {}

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

std::vector<std::byte> HostCollective::all_to_all(int rank, const std::byte* rows, size_t row_bytes,
                                                  std::span<const int64_t> send_counts,
                                                  std::vector<int64_t>& received_counts) {
  if (static_cast<int>(send_counts.size()) != size_) {
    fail("all_to_all: {} send counts for a group of {} ranks", send_counts.size(), size_);
  }
  byte_buffers_[rank] = rows;
  counts_[rank] = send_counts;
  barrier_.arrive_and_wait();
  received_counts.assign(static_cast<size_t>(size_), 0);
  int64_t num_received = 0;
  for (int source = 0; source < size_; ++source) {
    received_counts[source] = counts_[source][rank];
    num_received += received_counts[source];
  }
  std::vector<std::byte> received(static_cast<size_t>(num_received) * row_bytes);
  std::byte* out = received.data();
  for (int source = 0; source < size_; ++source) {
    // The source's rows for `rank` follow its rows for the ranks before it.
    int64_t offset = 0;
    for (int r = 0; r < rank; ++r) offset += counts_[source][r];
    const size_t bytes = static_cast<size_t>(received_counts[source]) * row_bytes;
    if (bytes > 0) std::memcpy(out, byte_buffers_[source] + offset * row_bytes, bytes);
    out += bytes;
  }
  // Nobody reuses its buffers until everyone has read.
  barrier_.arrive_and_wait();
  return received;
}

}  // namespace tern
