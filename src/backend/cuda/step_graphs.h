#pragma once
// Decode steps as CUDA graphs: the first step of each shape (tokens, sequences, logit rows, and the split-KV
// attention's shares per token, which grow with the context in powers of two) runs eagerly and is recorded; later
// steps of that shape upload their metadata into a fixed buffer and replay the graph, so a step costs one graph
// launch instead of hundreds of kernel launches. Intermediates of recorded steps live in the allocator's recorded
// pool (DeviceAllocator::set_recording). Recordings are kept per recorder (Backend::run_recorded_step).
#include <cuda_runtime.h>

#include <compare>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/cuda_step.h"
#include "backend/cuda/device_allocator.h"

namespace tern::cuda {

class StepGraphs {
 public:
  using MakeContext = std::function<std::unique_ptr<CudaStepContext>(const FixedMetadata&)>;

  StepGraphs(DeviceAllocator& allocator, cudaStream_t stream);
  ~StepGraphs();
  StepGraphs(const StepGraphs&) = delete;
  StepGraphs& operator=(const StepGraphs&) = delete;

  // The step's outputs on the device, from a replay (the graph's output buffers, which the next replay of the shape
  // overwrites) or, for a new shape, an eager run that is then recorded.
  StepOutputs run(const ForwardBatch& batch, const MakeContext& make_context, const StepForward& forward,
                  uint64_t recorder);
  // Drops the recordings of `recorder`.
  void discard(uint64_t recorder);
  size_t num_recorded() const { return graphs_.size(); }

 private:
  struct Recorded {
    cudaGraphExec_t exec = nullptr;
    StepOutputs outputs;  // the graph's, kept allocated between replays
  };
  // What a recording depends on besides the metadata's values.
  struct Shape {
    uint64_t recorder = 0;
    int64_t tokens = 0;
    size_t sequences = 0;
    size_t logit_rows = 0;
    bool logit_rows_are_tokens = false;  // the lm_head reads the last layer's rows in place (gather_logit_rows)
    int attention_shares = 0;
    bool all_heads = false;
    bool whole_context = false;
    auto operator<=>(const Shape&) const = default;
  };

  // Makes the fixed buffer hold at least `values` int32 values; a new buffer invalidates every recording.
  void reserve(size_t values);
  void clear();

  DeviceAllocator& allocator_;
  cudaStream_t stream_;
  Tensor buffer_;
  FixedMetadata fixed_;
  std::map<Shape, Recorded> graphs_;
};

}  // namespace tern::cuda
