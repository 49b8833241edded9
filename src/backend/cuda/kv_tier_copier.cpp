#include "backend/cuda/kv_tier_copier.h"

#include <cstring>
#include <memory>

#include "backend/cuda/cuda_check.h"
#include "backend/kv_block_transfer.h"
#include "elementwise/kv_block_copy.h"

namespace tern::cuda {

KvTierCopier::KvTierCopier(cudaStream_t compute_stream) : compute_stream_(compute_stream) {
  check(cudaStreamCreateWithFlags(&copy_stream_, cudaStreamNonBlocking), "KV tier copy stream");
  check(cudaEventCreateWithFlags(&compute_done_, cudaEventDisableTiming), "KV tier copy event");
}

KvTierCopier::~KvTierCopier() {
  cudaStreamSynchronize(copy_stream_);
  for (cudaEvent_t event : layer_events_) cudaEventDestroy(event);
  for (auto [start, end] : timings_) {
    cudaEventDestroy(start);
    cudaEventDestroy(end);
  }
  cudaEventDestroy(compute_done_);
  cudaStreamDestroy(copy_stream_);
}

Tensor KvTierCopier::pinned_zeros(DType dtype, std::vector<int64_t> shape) {
  Tensor tensor{dtype, std::move(shape), nullptr, nullptr, nullptr};
  if (tensor.bytes() == 0) return tensor;
  void* memory = nullptr;
  check(cudaMallocHost(&memory, tensor.bytes()), "host KV cache: cudaMallocHost");
  std::memset(memory, 0, tensor.bytes());
  tensor.data = memory;
  tensor.storage = std::shared_ptr<void>(memory, cudaFreeHost);
  return tensor;
}

cudaEvent_t KvTierCopier::layer_event(int layer) {
  while (static_cast<int>(layer_events_.size()) <= layer) {
    cudaEvent_t event = nullptr;
    check(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "KV tier layer event");
    layer_events_.push_back(event);
    layer_pending_.push_back(false);
  }
  return layer_events_[static_cast<size_t>(layer)];
}

void KvTierCopier::copy(const KvCache& from, std::span<const int32_t> from_blocks, KvCache& to,
                        std::span<const int32_t> to_blocks) {
  if (from_blocks.empty()) return;
  seconds();  // counts (and frees the events of) the copies finished meanwhile
  // After the compute launched so far: it may still read a block copied out or write one copied over.
  check(cudaEventRecord(compute_done_, compute_stream_), "KV tier copy: cudaEventRecord");
  check(cudaStreamWaitEvent(copy_stream_, compute_done_), "KV tier copy: cudaStreamWaitEvent");
  cudaEvent_t start = nullptr;
  cudaEvent_t end = nullptr;
  check(cudaEventCreate(&start), "KV tier copy: timing event");
  check(cudaEventCreate(&end), "KV tier copy: timing event");
  timings_.emplace_back(start, end);
  check(cudaEventRecord(start, copy_stream_), "KV tier copy: cudaEventRecord");
  check_kv_cache_copy(from, from_blocks, to, to_blocks);
  for (size_t layer = 0; layer < from.layers.size(); ++layer) {
    kernels::KvLayerCopy tensors;
    int t = 0;
    for (const auto& [from_tensors, to_tensors] : {std::pair{&from.keys, &to.keys}, std::pair{&from.values, &to.values},
                                                   std::pair{&from.states, &to.states}}) {
      const Tensor& source = (*from_tensors)[layer];
      if (source.data && source.bytes() > 0) {
        tensors.src[t] = source.data;
        tensors.dst[t] = (*to_tensors)[layer].data;
        tensors.block_bytes[t] = source.bytes() / static_cast<size_t>(from.num_blocks);
      }
      ++t;
    }
    launch("KV tier copy", [&] {
      kernels::launch_kv_block_copy(tensors, from_blocks.data(), to_blocks.data(),
                                    static_cast<int>(from_blocks.size()), copy_stream_);
    });
    check(cudaEventRecord(layer_event(static_cast<int>(layer)), copy_stream_), "KV tier copy: cudaEventRecord");
    layer_pending_[layer] = true;
  }
  check(cudaEventRecord(end, copy_stream_), "KV tier copy: cudaEventRecord");
}

void KvTierCopier::await_layer(int layer) {
  if (layer < 0 || layer >= static_cast<int>(layer_pending_.size()) || !layer_pending_[static_cast<size_t>(layer)]) {
    return;
  }
  check(cudaStreamWaitEvent(compute_stream_, layer_events_[static_cast<size_t>(layer)]), "KV tier: await layer");
  layer_pending_[static_cast<size_t>(layer)] = false;
}

void KvTierCopier::await_all() {
  for (int layer = 0; layer < static_cast<int>(layer_pending_.size()); ++layer) await_layer(layer);
}

void KvTierCopier::wait() { check(cudaStreamSynchronize(copy_stream_), "KV tier copies"); }

double KvTierCopier::seconds() {
  std::erase_if(timings_, [&](const std::pair<cudaEvent_t, cudaEvent_t>& timing) {
    if (cudaEventQuery(timing.second) != cudaSuccess) return false;
    float ms = 0.0f;
    check(cudaEventElapsedTime(&ms, timing.first, timing.second), "KV tier copy: cudaEventElapsedTime");
    seconds_ += ms / 1e3;
    cudaEventDestroy(timing.first);
    cudaEventDestroy(timing.second);
    return true;
  });
  return seconds_;
}

}  // namespace tern::cuda
