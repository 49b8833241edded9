#include "backend/cuda/step_graphs.h"

#include "attention/decode_attention.h"
#include "backend/cuda/cuda_check.h"
#include "core/error.h"

namespace tern::cuda {

namespace {

// An upper bound of the int32 values a decode step's metadata takes (CudaStepContext's layout): per token its id,
// position, sequence, plan row and up to kDecodeMaxSplits split items of two values; per sequence four values and
// one more per block table (its offset); block tables; 4-value alignment padding of each of the 13 arrays and of
// each table-offset array past the first.
size_t metadata_values(const ForwardBatch& batch) {
  const size_t per_token = 5 + 2 * kernels::kDecodeMaxSplits;
  size_t values = static_cast<size_t>(batch.num_tokens()) * per_token + 4 * (batch.sequences.size() + 1) +
                  batch.logit_rows.size() + 13 * 4;
  for (const auto& seq : batch.sequences) {
    values += seq.block_tables.size() + 4;
    for (const auto& table : seq.block_tables) values += table.size();
  }
  return values;
}

}  // namespace

StepGraphs::StepGraphs(DeviceAllocator& allocator, cudaStream_t stream) : allocator_(allocator), stream_(stream) {}

StepGraphs::~StepGraphs() { clear(); }

void StepGraphs::clear() {
  for (auto& [shape, recorded] : graphs_) cudaGraphExecDestroy(recorded.exec);
  graphs_.clear();
}

void StepGraphs::discard(uint64_t recorder) {
  for (auto it = graphs_.begin(); it != graphs_.end();) {
    if (it->first.recorder != recorder) {
      ++it;
      continue;
    }
    cudaGraphExecDestroy(it->second.exec);
    it = graphs_.erase(it);
  }
}

void StepGraphs::reserve(size_t values) {
  if (values <= fixed_.capacity) return;
  clear();
  // Room for contexts to grow before the next reallocation (each reallocation records every shape again).
  const size_t capacity = std::max<size_t>(values * 2, size_t{1} << 20);
  buffer_ = allocator_.allocate(DType::I32, {static_cast<int64_t>(capacity)});
  fixed_ = {buffer_.ptr<int32_t>(), capacity};
}

StepOutputs StepGraphs::run(const ForwardBatch& batch, const MakeContext& make_context, const StepForward& forward,
                            uint64_t recorder) {
  reserve(metadata_values(batch));
  // The metadata upload runs before the graph on the same stream, so the previous replay has finished reading
  // the buffer when it is overwritten.
  const std::unique_ptr<CudaStepContext> step = make_context(fixed_);
  const AttentionPlan& plan = step->attention_plan(false);
  const Shape shape{.recorder = recorder,
                    .tokens = batch.num_tokens(),
                    .sequences = batch.sequences.size(),
                    .logit_rows = batch.logit_rows.size(),
                    .logit_rows_are_tokens = logit_rows_are_tokens(batch),
                    .attention_shares = plan.num_splits,
                    .all_heads = plan.all_heads,
                    .whole_context = plan.whole_context};
  if (const auto it = graphs_.find(shape); it != graphs_.end()) {
    check(cudaGraphLaunch(it->second.exec, stream_), "cudaGraphLaunch");
    return it->second.outputs;
  }

  // An eager run computes this step (and makes every lazy choice, such as GEMM algorithms, outside the recording);
  // the recording that follows launches nothing, so the eager run's outputs are the step's.
  StepOutputs outputs = forward(*step);
  Recorded recorded;
  cudaGraph_t graph = nullptr;
  allocator_.set_recording(true);
  check(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeRelaxed), "cudaStreamBeginCapture");
  try {
    recorded.outputs = forward(*step);
  } catch (...) {
    cudaStreamEndCapture(stream_, &graph);
    if (graph) cudaGraphDestroy(graph);
    allocator_.set_recording(false);
    throw;
  }
  const cudaError_t captured = cudaStreamEndCapture(stream_, &graph);
  allocator_.set_recording(false);
  check(captured, "cudaStreamEndCapture");
  const cudaError_t instantiated = cudaGraphInstantiate(&recorded.exec, graph, 0);
  cudaGraphDestroy(graph);
  check(instantiated, "cudaGraphInstantiate");
  const Tensor& ids = recorded.outputs.ids;
  if (ids.dtype != DType::I32 || ids.numel() != static_cast<int64_t>(batch.logit_rows.size())) {
    cudaGraphExecDestroy(recorded.exec);
    fail("recorded step: the forward returned {} values of {} for {} logit rows", ids.numel(), dtype_name(ids.dtype),
         batch.logit_rows.size());
  }
  graphs_.emplace(shape, std::move(recorded));
  return outputs;
}

}  // namespace tern::cuda
