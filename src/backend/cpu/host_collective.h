#pragma once
// The collectives of CPU ranks that are threads of one process: each rank passes its buffer, and ranks read each
// other's buffers between two barriers. Every rank sums in rank order, so all ranks get bit-identical results (what
// NCCL guarantees too), which keeps their greedy choices equal.
#include <barrier>
#include <cstdint>
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

 private:
  int size_;
  std::barrier<> barrier_;
  std::vector<const float*> buffers_;  // the rank's buffer of the collective in progress
};

}  // namespace tern
