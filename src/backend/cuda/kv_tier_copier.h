#pragma once
// The KV cache's host tier on CUDA: a pinned twin of the device cache, and the copies between the two on a stream of
// their own. Each copy_kv_blocks call waits for the work launched on the compute stream so far, issues its runs
// layer by layer and records an event per layer; the compute stream waits for a layer's event only before the
// first op of the step that touches that layer, so that loading layer N + 1 overlaps computing layer N (SGLang's
// HiCache layer-wise loading).
#include <cuda_runtime.h>

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "backend/kv_cache.h"
#include "backend/tensor.h"

namespace tern::cuda {

class KvTierCopier {
 public:
  explicit KvTierCopier(cudaStream_t compute_stream);
  ~KvTierCopier();
  KvTierCopier(const KvTierCopier&) = delete;
  KvTierCopier& operator=(const KvTierCopier&) = delete;

  // A zeroed tensor in pinned host memory (the host twin's storage).
  static Tensor pinned_zeros(DType dtype, std::vector<int64_t> shape);
  void copy(const KvCache& from, std::span<const int32_t> from_blocks, KvCache& to, std::span<const int32_t> to_blocks);
  // The compute stream waits for the copies of `layer` issued so far (once per copy).
  void await_layer(int layer);
  // ... and for those of every layer: before a recorded step, whose capture cannot wait on outside events.
  void await_all();
  // Blocks the host until every copy has finished.
  void wait();
  // Device seconds of the copies finished so far.
  double seconds();

 private:
  cudaEvent_t layer_event(int layer);

  cudaStream_t compute_stream_;
  cudaStream_t copy_stream_ = nullptr;
  cudaEvent_t compute_done_ = nullptr;
  std::vector<cudaEvent_t> layer_events_;
  std::vector<bool> layer_pending_;
  // Start and end of each copy call not yet counted in seconds().
  std::vector<std::pair<cudaEvent_t, cudaEvent_t>> timings_;
  double seconds_ = 0.0;
};

}  // namespace tern::cuda
