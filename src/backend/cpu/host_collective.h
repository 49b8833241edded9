#pragma once
// The collectives of CPU ranks that are threads of one process: each rank passes its buffer, and ranks read each
// other's buffers between two barriers. Every rank sums in rank order, so all ranks get bit-identical results (what
// NCCL guarantees too), which keeps their greedy choices equal.
#include <barrier>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace tern {

class HostCollective {
 public:
  explicit HostCollective(int size);
  int size() const { return size_; }

  // values[0 .. count) <- the sum over ranks of each rank's values.
  void all_reduce_sum(int rank, float* values, int64_t count);
  // Each rank's [rows, columns] shard -> out [rows, num_columns]: rank r's columns at [r * columns, ...), cut at
  // num_columns.
  void all_gather_columns(int rank, const float* shard, int64_t rows, int64_t columns, float* out,
                          int64_t num_columns);
  // All-to-all of rows of `row_bytes` bytes: `rows` holds send_counts[0] rows for rank 0, then send_counts[1] for
  // rank 1, ...; returns the rows sent to `rank`, grouped by source rank in rank order, with their counts per
  // source in received_counts.
  std::vector<std::byte> all_to_all(int rank, const std::byte* rows, size_t row_bytes,
                                    std::span<const int64_t> send_counts, std::vector<int64_t>& received_counts);

 private:
  int size_;
  std::barrier<> barrier_;
  std::vector<const float*> buffers_;  // the rank's buffer of the collective in progress
  // all_to_all's: each rank's rows and counts
  std::vector<const std::byte*> byte_buffers_;
  std::vector<std::span<const int64_t>> counts_;
};

}  // namespace tern
